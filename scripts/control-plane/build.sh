#!/usr/bin/env bash
# Builds the real Kubernetes control plane that the integration tests run against: kube-apiserver,
# kube-scheduler and kube-controller-manager, etcd, and kwok (the controller that plays the kubelet for
# fake nodes and pods); helm, which the Helm chart's tests (crates/cli/tests/helm_chart.rs) render
# deploy/helm/ferroscale with; promtool, which checks the alert rules Ferroscale ships
# (crates/metrics/tests/monitoring_files.rs); and the externalgrpc interop tool
# (test-tools/externalgrpc-interop), the Go peer of crates/cli/tests/externalgrpc_interop.rs. It also
# fetches (nothing to build) the Cluster
# API CRD manifests that the Cluster API provider's tests install into the control plane.
#
# Everything is built from published Go modules through the module proxy, at the versions pinned in
# versions.env beside this script, into a cache outside the repository:
#
#   ${FERROSCALE_CONTROL_PLANE_CACHE:-$HOME/.cache/ferroscale/control-plane}/<component>-<version>/bin
#
# A component whose binaries are already there is skipped, so a second run costs nothing. A component
# is moved into place only after its binaries have been built and have answered --version, so an
# interrupted build never leaves a directory that looks finished.
#
# With arguments, only the components named are built (etcd, kwok, kubernetes, helm, promtool,
# externalgrpc-interop, cluster-api), e.g. `build.sh promtool` after a version bump.
set -euo pipefail

script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$script_dir/versions.env"

cache_root=${FERROSCALE_CONTROL_PLANE_CACHE:-$HOME/.cache/ferroscale/control-plane}

# The machines have 2 cores: two parallel package builds keep both busy without oversubscribing them.
build_jobs=${FERROSCALE_CONTROL_PLANE_BUILD_JOBS:-2}

# Never let the go command fetch another toolchain: only the installed Go is to be used.
export GOTOOLCHAIN=local
# Paths inside the binaries must not depend on where the module cache is.
export GOFLAGS=-trimpath
export CGO_ENABLED=0

log() { printf 'control-plane: %s\n' "$*" >&2; }
fail() { printf 'control-plane: FAILED: %s\n' "$*" >&2; exit 1; }

# Non-interactive shells (CI) may not have the Go install directory on PATH.
if ! command -v go >/dev/null && [[ -x /usr/local/go/bin/go ]]; then
  PATH="/usr/local/go/bin:$PATH"
fi
command -v go >/dev/null || fail "the go command is missing; Go 1.26 or later is needed to build the control plane"
go_minor=$(go env GOVERSION | sed -E 's/^go1\.([0-9]+).*/\1/')
[[ "$go_minor" =~ ^[0-9]+$ ]] && (( go_minor >= 26 )) \
  || fail "Go $(go env GOVERSION) is too old; Kubernetes $KUBERNETES_VERSION needs Go 1.26 or later"

mkdir -p "$cache_root"
# Two runs at once (two terminals, CI plus a developer) would build the same thing twice; make the
# second one wait and then find everything done.
exec 9>"$cache_root/.build.lock"
flock 9

work_dir=$(mktemp -d "${TMPDIR:-/tmp}/ferroscale-control-plane-build.XXXXXX")
trap 'rm -rf "$work_dir"' EXIT

# component_dir NAME VERSION -> the cache directory of one component.
component_dir() { printf '%s/%s-%s' "$cache_root" "$1" "$2"; }

# already_built NAME VERSION BINARY... -> true (and says so) when every binary of the component is
# present and executable in its cache directory.
already_built() {
  local name=$1 version=$2; shift 2
  local dir binary
  dir=$(component_dir "$name" "$version")
  for binary in "$@"; do
    [[ -x "$dir/bin/$binary" ]] || return 1
  done
  log "$name $version: already built in $dir/bin, skipped"
}

# new_build_module NAME -> creates and prints a throw-away Go module directory to build in. The
# products are main packages of other modules; building them from a module of our own lets us add
# the replace directives that `go install pkg@version` would refuse.
new_build_module() {
  local dir="$work_dir/$1"
  mkdir -p "$dir/bin"
  printf 'module ferroscale.invalid/control-plane-build/%s\n\ngo 1.26.0\n' "$1" >"$dir/go.mod"
  printf '%s' "$dir"
}

# verify_and_install NAME VERSION BUILD_DIR BINARY... -> runs `BINARY --version` for each binary, shows
# what it says, and moves the binaries into the cache.
verify_and_install() {
  local name=$1 version=$2 build_dir=$3; shift 3
  local binary
  for binary in "$@"; do
    verify_runs "$name" "$build_dir" "$binary" --version >/dev/null
  done
  install_built "$name" "$version" "$build_dir"
}

# verify_runs NAME BUILD_DIR BINARY ARG... -> runs the built binary with the arguments that make it
# print its version, shows the first line and prints the whole output.
verify_runs() {
  local name=$1 build_dir=$2 binary=$3; shift 3
  local output
  output=$("$build_dir/bin/$binary" "$@" 2>&1) \
    || fail "$name: '$binary $*' did not run: $output"
  log "$name: $binary $*: $(head -n 1 <<<"$output")"
  printf '%s' "$output"
}

# install_built NAME VERSION BUILD_DIR -> moves the verified binaries into the cache.
install_built() {
  local name=$1 version=$2 build_dir=$3
  local target
  target=$(component_dir "$name" "$version")
  rm -rf "$target"
  mkdir -p "$target"
  mv "$build_dir/bin" "$target/bin"
  log "$name: installed in $target/bin"
}

# resolve_modules NAME VERSION MODULE_DIR PACKAGE@VERSION... -> adds the packages' modules and their
# dependencies to the throw-away module. The go command lists every module it downloads; that goes to
# a file and is shown only if resolving fails, so the progress lines stay readable.
resolve_modules() {
  local name=$1 version=$2 module=$3; shift 3
  log "$name $version: resolving modules (downloads through the Go module proxy)"
  if ! (cd "$module" && go get "$@") >"$module/go-get.log" 2>&1; then
    cat "$module/go-get.log" >&2
    fail "$name $version: resolving the module graph failed (go get $*)"
  fi
}

build_kubernetes() {
  local version=$KUBERNETES_VERSION
  already_built kubernetes "$version" kube-apiserver kube-scheduler kube-controller-manager && return
  log "kubernetes $version: building kube-apiserver, kube-scheduler and kube-controller-manager (the slowest part, about 8 minutes on 2 cores)"
  local start=$SECONDS module
  module=$(new_build_module kubernetes)

  # k8s.io/kubernetes requires its staging modules (k8s.io/api, k8s.io/apiserver, ...) at v0.0.0 and
  # replaces them with directories of its own repository. Pin each one to the release published
  # alongside: Kubernetes v1.X.Y ships its staging modules as v0.X.Y.
  local staging_version="v0.${version#v1.}"
  local kubernetes_gomod
  kubernetes_gomod=$(cd "$module" && go mod download -json "k8s.io/kubernetes@$version" \
    | sed -n -E 's/^[[:space:]]*"GoMod": "(.*)",?$/\1/p') \
    || fail "kubernetes $version: could not download k8s.io/kubernetes from the module proxy"
  [[ -f "$kubernetes_gomod" ]] || fail "kubernetes $version: no go.mod for k8s.io/kubernetes@$version"
  local staging_modules
  staging_modules=$(sed -n -E 's#^[[:space:]]*(k8s\.io/[a-z0-9-]+) => \./staging/src/.*#\1#p' "$kubernetes_gomod")
  [[ -n "$staging_modules" ]] || fail "kubernetes $version: found no staging modules in its go.mod"
  {
    printf '\nrequire k8s.io/kubernetes %s\n\nreplace (\n' "$version"
    local staging
    for staging in $staging_modules; do
      printf '\t%s => %s %s\n' "$staging" "$staging" "$staging_version"
    done
    printf ')\n'
  } >>"$module/go.mod"

  resolve_modules kubernetes "$version" "$module" "k8s.io/kubernetes/cmd/kube-apiserver@$version" \
    "k8s.io/kubernetes/cmd/kube-scheduler@$version" "k8s.io/kubernetes/cmd/kube-controller-manager@$version"

  # The version the binaries report (and serve on /version) is normally stamped by Kubernetes' own
  # release scripts; stamp the same variables so clients see the real release.
  local minor=${version#v1.}
  minor=${minor%%.*}
  local stamp="" package
  for package in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    stamp+=" -X $package.gitVersion=$version -X $package.gitMajor=1 -X $package.gitMinor=$minor"
    stamp+=" -X $package.gitTreeState=clean -X $package.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  done
  (cd "$module" && go build -p "$build_jobs" -ldflags "-s -w$stamp" -o bin/ \
      k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-scheduler \
      k8s.io/kubernetes/cmd/kube-controller-manager) \
    || fail "kubernetes $version: go build of kube-apiserver/kube-scheduler/kube-controller-manager failed"
  verify_and_install kubernetes "$version" "$module" kube-apiserver kube-scheduler kube-controller-manager
  log "kubernetes $version: built in $((SECONDS - start))s"
}

build_etcd() {
  local version=$ETCD_VERSION
  already_built etcd "$version" etcd && return
  log "etcd $version: building etcd"
  local start=$SECONDS module
  module=$(new_build_module etcd)
  # The server module's own replace directives (to sibling directories of the etcd repository) are
  # ignored for a dependency, and its requirements name real releases, so no replace is needed here.
  resolve_modules etcd "$version" "$module" "go.etcd.io/etcd/server/v3@$version"
  (cd "$module" && go build -p "$build_jobs" -ldflags "-s -w" -o bin/etcd go.etcd.io/etcd/server/v3) \
    || fail "etcd $version: go build failed"
  verify_and_install etcd "$version" "$module" etcd
  log "etcd $version: built in $((SECONDS - start))s"
}

build_kwok() {
  local version=$KWOK_VERSION
  already_built kwok "$version" kwok && return
  log "kwok $version: building the kwok controller"
  local start=$SECONDS module
  module=$(new_build_module kwok)
  resolve_modules kwok "$version" "$module" "sigs.k8s.io/kwok/cmd/kwok@$version"
  (cd "$module" && go build -p "$build_jobs" -ldflags "-s -w" -o bin/kwok sigs.k8s.io/kwok/cmd/kwok) \
    || fail "kwok $version: go build failed"
  verify_and_install kwok "$version" "$module" kwok
  log "kwok $version: built in $((SECONDS - start))s"
}

# helm is not part of the control plane: the chart tests run `helm template`, which needs no cluster.
# Timed on the 2 shared cores: 316 s cold (empty Go module and build caches; 164 s of CPU), 128 s
# after the other components have filled the Go caches.
build_helm() {
  local version=$HELM_VERSION
  already_built helm "$version" helm && return
  log "helm $version: building helm (about 5 minutes cold on 2 cores, 2 with the Go caches warm from the control plane)"
  local start=$SECONDS module
  module=$(new_build_module helm)
  resolve_modules helm "$version" "$module" "helm.sh/helm/v3/cmd/helm@$version"

  # Helm's release build stamps its version, and the Kubernetes version `helm template` assumes for
  # .Capabilities.KubeVersion (otherwise v1.20), the latter from the client-go it was built with.
  local client_go
  client_go=$(cd "$module" && go list -m -f '{{.Version}}' k8s.io/client-go) \
    || fail "helm $version: could not tell which k8s.io/client-go it resolved to"
  [[ "$client_go" =~ ^v0\.([0-9]+)\. ]] \
    || fail "helm $version: unexpected k8s.io/client-go version $client_go"
  local kube_minor=${BASH_REMATCH[1]}
  local stamp=" -X helm.sh/helm/v3/internal/version.version=$version"
  stamp+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
  local package
  for package in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
    stamp+=" -X $package.k8sVersionMajor=1 -X $package.k8sVersionMinor=$kube_minor"
  done
  (cd "$module" && go build -p "$build_jobs" -ldflags "-s -w$stamp" -o bin/helm helm.sh/helm/v3/cmd/helm) \
    || fail "helm $version: go build failed"

  # helm answers `helm version`, not --version; the stamp must have taken, or the tests would run an
  # unidentifiable helm.
  local reported
  reported=$(verify_runs helm "$module" helm version --short)
  [[ "$reported" == "$version"* ]] \
    || fail "helm $version: 'helm version --short' says $reported, not $version"
  install_built helm "$version" "$module"
  log "helm $version: built in $((SECONDS - start))s"
}

# promtool is not part of the control plane either: the monitoring files' test runs `promtool check
# rules` on the alert rules Ferroscale ships. It comes from the github.com/prometheus/prometheus
# module, whose Go versions are v0.3XX.Y for Prometheus release 3.XX.Y; its plugin imports bring in
# every service discovery's cloud SDK. Timed on the 2 cores with empty Go module and build caches:
# 21 s resolving (1.8 GB of modules) and 176 s building (355 s of CPU, 1.7 GB of build cache).
build_promtool() {
  local version=$PROMETHEUS_VERSION
  already_built promtool "$version" promtool && return
  log "promtool $version: building promtool (about 3.5 minutes cold on 2 cores)"
  local start=$SECONDS module
  module=$(new_build_module promtool)
  resolve_modules promtool "$version" "$module" "github.com/prometheus/prometheus/cmd/promtool@$version"

  # Prometheus' release build stamps the version promtool reports: v0.3XX.Y is release 3.XX.Y.
  local number=${version#v0.}
  local major_minor=${number%%.*}
  local release="${major_minor:0:1}.${major_minor:1}.${number#*.}"
  local stamp=" -X github.com/prometheus/common/version.Version=$release"
  stamp+=" -X github.com/prometheus/common/version.Branch=release-${release%.*}"
  (cd "$module" && go build -p "$build_jobs" -ldflags "-s -w$stamp" -o bin/promtool \
      github.com/prometheus/prometheus/cmd/promtool) \
    || fail "promtool $version: go build failed"
  local reported
  reported=$(verify_runs promtool "$module" promtool --version)
  [[ "$reported" == *"version $release"* ]] \
    || fail "promtool $version: 'promtool --version' says $reported, not $release"
  install_built promtool "$version" "$module"
  log "promtool $version: built in $((SECONDS - start))s"
}

# The externalgrpc interop tool is Ferroscale's own Go program (test-tools/externalgrpc-interop), not a
# published release: its dependencies are pinned by its go.mod and go.sum, and it is rebuilt whenever
# its sources change, which a hash of them, kept beside the binary, tells. The binary goes to
# <cache>/externalgrpc-interop/bin, the place crates/testing-control-plane looks.
# Timed on the 2 shared cores: 69 s cold (empty Go module and build caches, downloads included), 20 s
# with the caches warm from the control-plane components; skipped while its sources are unchanged.
build_externalgrpc_interop() {
  local source_dir
  source_dir=$(cd "$script_dir/../../test-tools/externalgrpc-interop" && pwd)
  local target=$cache_root/externalgrpc-interop
  local sources_hash
  sources_hash=$(cd "$source_dir" && cat go.mod go.sum ./*.go ./*.proto | sha256sum | cut -d' ' -f1)
  if [[ -x "$target/bin/externalgrpc-interop" && "$(cat "$target/sources.sha256" 2>/dev/null)" == "$sources_hash" ]]; then
    log "externalgrpc-interop: already built from these sources in $target/bin, skipped"
    return
  fi
  log "externalgrpc-interop: building the Go interop peer (about 70 s cold on 2 cores, 20 s with warm Go caches)"
  local start=$SECONDS build_dir=$work_dir/externalgrpc-interop
  mkdir -p "$build_dir/bin"
  # -mod=readonly: a go.sum that does not cover the build is an error here, never silently updated.
  (cd "$source_dir" && go build -mod=readonly -p "$build_jobs" -ldflags "-s -w" \
      -o "$build_dir/bin/externalgrpc-interop" .) \
    || fail "externalgrpc-interop: go build in $source_dir failed"
  verify_runs externalgrpc-interop "$build_dir" externalgrpc-interop version >/dev/null
  rm -rf "$target"
  mkdir -p "$target"
  mv "$build_dir/bin" "$target/bin"
  printf '%s\n' "$sources_hash" >"$target/sources.sha256"
  log "externalgrpc-interop: installed in $target/bin, built in $((SECONDS - start))s"
}

# The CRDs of Cluster API's core objects, as published in the sigs.k8s.io/cluster-api module (its
# core/config/crd/bases directory), copied into <cache>/cluster-api-<version>/crds. Nothing is built:
# the module is only downloaded, through the module proxy and nothing else (no direct VCS fetch).
# The bases carry no conversion webhook (kustomize patches add it in a real install), so the API
# server accepts them alone and serves every version with conversion "None".
cluster_api_crd_files=(
  cluster.x-k8s.io_clusters.yaml
  cluster.x-k8s.io_machinedeployments.yaml
  cluster.x-k8s.io_machinesets.yaml
  cluster.x-k8s.io_machines.yaml
  cluster.x-k8s.io_machinepools.yaml
)

# already_fetched NAME VERSION FILE... -> true (and says so) when every file of the component is
# present in its cache directory; the counterpart of already_built for components that are data.
already_fetched() {
  local name=$1 version=$2; shift 2
  local dir file
  dir=$(component_dir "$name" "$version")
  for file in "$@"; do
    [[ -s "$dir/$file" ]] || return 1
  done
  log "$name $version: already fetched in $dir, skipped"
}

fetch_cluster_api_crds() {
  local version=$CLUSTER_API_VERSION
  local relative=("${cluster_api_crd_files[@]/#/crds/}")
  already_fetched cluster-api "$version" "${relative[@]}" && return
  log "cluster-api $version: downloading sigs.k8s.io/cluster-api for its CRD manifests"
  # The proxy only: a module the proxy does not serve must fail here, not be cloned from GitHub.
  local proxy
  proxy=$(go env GOPROXY | tr ',|' '\n\n' | grep -v -x -e direct -e off -e '' | paste -s -d, -) || true
  [[ -n "$proxy" ]] || fail "cluster-api $version: GOPROXY ($(go env GOPROXY)) names no module proxy"
  # A module cache of its own under the cache root, writable (-modcacherw) so it can be deleted with rm.
  local module_cache=$cache_root/go-modules download
  download=$(cd "$work_dir" && GOPROXY=$proxy GOMODCACHE=$module_cache GOFLAGS="-mod=mod -modcacherw" \
      go mod download -json "sigs.k8s.io/cluster-api@$version" 2>&1) \
    || fail "cluster-api $version: go mod download sigs.k8s.io/cluster-api@$version failed: $download"
  local module_dir
  module_dir=$(sed -n -E 's/^[[:space:]]*"Dir": "(.*)",?$/\1/p' <<<"$download")
  [[ -d "$module_dir" ]] || fail "cluster-api $version: go mod download named no module directory: $download"
  local bases=$module_dir/core/config/crd/bases staged=$work_dir/cluster-api-crds file
  mkdir -p "$staged"
  for file in "${cluster_api_crd_files[@]}"; do
    [[ -f "$bases/$file" ]] || fail "cluster-api $version: $file is not in core/config/crd/bases of the module"
    grep -q '^kind: CustomResourceDefinition$' "$bases/$file" \
      || fail "cluster-api $version: $bases/$file is not a CustomResourceDefinition"
    # A webhook conversion in a base would make the API server call a webhook that does not exist.
    ! grep -q 'strategy: Webhook' "$bases/$file" \
      || fail "cluster-api $version: $bases/$file needs a conversion webhook"
    install -m 0644 "$bases/$file" "$staged/$file"
  done
  local target
  target=$(component_dir cluster-api "$version")
  rm -rf "$target"
  mkdir -p "$target"
  mv "$staged" "$target/crds"
  log "cluster-api $version: CRDs installed in $target/crds"
}

total_start=$SECONDS
log "building into $cache_root (Go $(go env GOVERSION), $build_jobs parallel jobs)"
components=("$@")
(( ${#components[@]} > 0 )) || components=(etcd kwok kubernetes helm promtool externalgrpc-interop cluster-api)
for component in "${components[@]}"; do
  case $component in
    etcd) build_etcd ;;
    kwok) build_kwok ;;
    kubernetes) build_kubernetes ;;
    helm) build_helm ;;
    promtool) build_promtool ;;
    externalgrpc-interop) build_externalgrpc_interop ;;
    cluster-api) fetch_cluster_api_crds ;;
    *) fail "unknown component '$component' (known: etcd kwok kubernetes helm promtool externalgrpc-interop cluster-api)" ;;
  esac
done
log "done in $((SECONDS - total_start))s; the components are in:"
log "  $(component_dir kubernetes "$KUBERNETES_VERSION")/bin"
log "  $(component_dir etcd "$ETCD_VERSION")/bin"
log "  $(component_dir kwok "$KWOK_VERSION")/bin"
log "  $(component_dir helm "$HELM_VERSION")/bin"
log "  $(component_dir promtool "$PROMETHEUS_VERSION")/bin"
log "  $cache_root/externalgrpc-interop/bin"
log "  $(component_dir cluster-api "$CLUSTER_API_VERSION")/crds"
