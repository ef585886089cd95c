{{/* The namespace of everything namespaced. */}}
{{- define "koordpy.namespace" -}}
{{- .Values.installation.namespace -}}
{{- end -}}

{{/* The image, its tag defaulting to the chart's appVersion. */}}
{{- define "koordpy.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* Labels on every object the chart makes. */}}
{{- define "koordpy.labels" -}}
app.kubernetes.io/name: koordpy
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* A config text from the values, templated (so overrides may use .Values too). */}}
{{- define "koordpy.text" -}}
{{- tpl (index . 0) (index . 1) -}}
{{- end -}}

{{/* The agent's agent.toml: the keys the DaemonSet needs, then koordlet.extraConfig. */}}
{{- define "koordpy.agentConfig" -}}
# Rendered by the koordpy chart (values koordlet.*).
[report]
transport = "kubernetes"

[kubernetes]
kubeconfig = ""                   # the pod's service account (in-cluster)

[cgroup]
root = "/host-cgroup"             # the host's {{ .Values.koordlet.hostDirs.cgroupRoot }}

[pods]
source = {{ .Values.koordlet.podsSource | quote }}
kubelet_insecure_tls = {{ .Values.koordlet.kubeletInsecureTLS }}   # koordlet's -kubelet-insecure-tls

[metrics]
address = ":{{ .Values.koordlet.metrics.port }}"
{{- with .Values.koordlet.extraConfig }}

# koordlet.extraConfig
{{ . | trim }}
{{- end }}
{{- end -}}

{{/* The controller's controller.toml: the keys the Deployment needs, then
manager.extraConfig. */}}
{{- define "koordpy.controllerConfig" -}}
# Rendered by the koordpy chart (values installation.namespace, manager.*).
[kubernetes]
lease_namespace = {{ include "koordpy.namespace" . | quote }}
config_namespace = {{ include "koordpy.namespace" . | quote }}
manager_duties = {{ .Values.manager.duties }}

[metrics]
address = ":{{ .Values.manager.metrics.port }}"
{{- with .Values.manager.extraConfig }}

# manager.extraConfig
{{ . | trim }}
{{- end }}
{{- end -}}
