{{/*
The configurations Koordinator v1.8's chart ships for koord-scheduler and koord-descheduler,
which koordpy's controller reads as they do (controller/scheduler/config.py,
controller/descheduler/config.py): the same plugins at the same points with the same args.
scheduler.config and descheduler.config replace them.
*/}}

{{- define "koordpy.schedulerConfig" -}}
{{- $ns := include "koordpy.namespace" . -}}
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: true
  resourceLock: leases
  resourceName: koord-scheduler
  resourceNamespace: {{ $ns }}
profiles:
  - schedulerName: koord-scheduler
    plugins:
      preEnqueue:
        enabled: [{name: Coscheduling}]
      queueSort:
        disabled: [{name: "*"}]
        enabled: [{name: PrioritySort}]
      preFilter:
        enabled:
          - name: SchedulingHint
          - name: Coscheduling
          - name: Reservation
          - name: NodeNUMAResource
          - name: DeviceShare
          - name: ElasticQuota
      filter:
        enabled:
          - name: Reservation
          - name: LoadAwareScheduling
          - name: NodeNUMAResource
          - name: DeviceShare
      postFilter:
        disabled: [{name: "*"}]
        enabled:
          - name: Reservation
          - name: Coscheduling
          - name: ElasticQuota
          {{- if not .Values.scheduler.enableJobPreemption }}
          - name: DefaultPreemption
          {{- end }}
      preScore:
        # Reservation first.
        enabled: [{name: Reservation}, {name: Coscheduling}]
      score:
        enabled:
          - {name: LoadAwareScheduling, weight: 1}
          - {name: NodeNUMAResource, weight: 1}
          - {name: DeviceShare, weight: 1}
          - {name: Reservation, weight: 5000}
          - {name: Coscheduling, weight: 1}
      reserve:
        # Reservation first.
        enabled:
          - name: Reservation
          - name: LoadAwareScheduling
          - name: NodeNUMAResource
          - name: DeviceShare
          - name: Coscheduling
          - name: ElasticQuota
      permit:
        enabled: [{name: Coscheduling}]
      preBind:
        enabled:
          - name: NodeNUMAResource
          - name: DeviceShare
          - name: Reservation
          - name: Coscheduling
          - name: DefaultPreBind
      bind:
        disabled: [{name: "*"}]
        enabled: [{name: Reservation}, {name: DefaultBinder}]
      postBind:
        enabled: [{name: Coscheduling}]
    pluginConfig:
      - name: NodeResourcesFit
        args:
          apiVersion: kubescheduler.config.k8s.io/v1
          kind: NodeResourcesFitArgs
          scoringStrategy:
            type: LeastAllocated
            resources:
              - {name: cpu, weight: 1}
              - {name: memory, weight: 1}
              - {name: kubernetes.io/batch-cpu, weight: 1}
              - {name: kubernetes.io/batch-memory, weight: 1}
      - name: LoadAwareScheduling
        args:
          apiVersion: kubescheduler.config.k8s.io/v1
          kind: LoadAwareSchedulingArgs
          filterExpiredNodeMetrics: false
          nodeMetricExpirationSeconds: 300
          resourceWeights: {cpu: 1, memory: 1}
          usageThresholds: {cpu: 65, memory: 95}
          estimatedScalingFactors: {cpu: 85, memory: 70}
      - name: ElasticQuota
        args:
          apiVersion: kubescheduler.config.k8s.io/v1
          kind: ElasticQuotaArgs
          quotaGroupNamespace: {{ $ns }}
      - name: Coscheduling
        args:
          apiVersion: kubescheduler.config.k8s.io/v1
          kind: CoschedulingArgs
          {{- if .Values.scheduler.enableJobPreemption }}
          enablePreemption: true
          {{- end }}
          awareNetworkTopology: true
{{- end -}}

{{- define "koordpy.deschedulerConfig" -}}
{{- $ns := include "koordpy.namespace" . -}}
apiVersion: descheduler/v1alpha2
kind: DeschedulerConfiguration
leaderElection:
  resourceLock: leases
  resourceName: koord-descheduler
  resourceNamespace: {{ $ns }}
deschedulingInterval: 10s
dryRun: false
profiles:
  - name: koord-descheduler
    plugins:
      deschedule:
        disabled: [{name: "*"}]
      # LowNodeLoad is configured below but not enabled; enable it with
      # balance: {enabled: [{name: LowNodeLoad}]}.
      evict:
        disabled: [{name: "*"}]
        enabled: [{name: MigrationController}]
    pluginConfig:
      - name: MigrationController
        args:
          apiVersion: descheduler/v1alpha2
          kind: MigrationControllerArgs
          evictionPolicy: Eviction
          namespaces:
            exclude: [kube-system, {{ $ns }}]
          evictQPS: "10"
          evictBurst: 1
      - name: LowNodeLoad
        args:
          apiVersion: descheduler/v1alpha2
          kind: LowNodeLoadArgs
          evictableNamespaces:
            exclude: [kube-system, {{ $ns }}]
          useDeviationThresholds: false
          lowThresholds: {cpu: 45, memory: 55}
          highThresholds: {cpu: 75, memory: 80}
{{- end -}}
