#!/usr/bin/env bash
# A throw-away Kubernetes control plane on 127.0.0.1 for the cluster tests (tests/cluster)
# and bench/kube_scale.py: etcd, kube-apiserver, kube-controller-manager and kwok (fake
# nodes and pod stages), optionally kube-scheduler. No kubelet, no containers.
#   scripts/controlplane.sh build            # once: go build into the cache (see below)
#   eval "$(scripts/controlplane.sh start)"  # prints export lines (SHOAL_CONTROLPLANE_DIR...)
#   eval "$(scripts/controlplane.sh env)"    # the same for the running one, plus KUBECONFIG
#   scripts/controlplane.sh stop
# The binaries are built from Go modules (tests/cluster/controlplane/{kube,etcd,kwok}) into
# a per-version cache outside the clone: $SHOAL_CONTROLPLANE_CACHE (default
# ~/.cache/shoal-controlplane)/<versions>/bin. Go's own caches (GOMODCACHE, GOCACHE) keep
# their default places. `start` builds first if a binary is missing and `go` is there.
# SHOAL_CONTROLPLANE_SCHEDULER=1 also starts kube-scheduler (default profile).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODS=$ROOT/tests/cluster/controlplane
K8S_VERSION=v1.37.2
ETCD_VERSION=v3.6.16
KWOK_VERSION=v0.8.0
KEY=k8s-$K8S_VERSION-etcd-$ETCD_VERSION-kwok-$KWOK_VERSION
CACHE=${SHOAL_CONTROLPLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/shoal-controlplane}
BIN=$CACHE/$KEY/bin
STATE=${TMPDIR:-/tmp}/shoal-controlplane.dir
# Beta in 1.37 but off by default: the Workload and PodGroup API (scheduling.k8s.io/v1beta1,
# also in --runtime-config) and ResourceClaims shared per PodGroup. DRA itself (GA), its
# partitionable devices and consumable capacity (Beta, on by default) need nothing here.
FEATURE_GATES=GenericWorkload=true,DRAWorkloadResourceClaims=true
BINARIES=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)

log() { echo "controlplane.sh: $*" >&2; }

missing() {
  local b
  for b in "${BINARIES[@]}"; do [ -x "$BIN/$b" ] || echo "$b"; done
}

build() {
  if [ -z "$(missing)" ]; then
    log "binaries up to date in $BIN"
    return 0
  fi
  command -v go >/dev/null || { log "go not found: cannot build $(missing | xargs)"; exit 1; }
  mkdir -p "$BIN"
  local v=k8s.io/component-base/version start=$SECONDS need
  need=" $(missing | xargs) "
  # Version stamps: without them the apiserver reports v0.0.0 and Helm refuses charts
  # with a kubeVersion constraint.
  local ldk="-s -w -X $v.gitVersion=$K8S_VERSION -X $v.gitMajor=1 -X $v.gitMinor=37"
  ldk+=" -X $v.gitTreeState=clean -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION"
  log "building${need% } (etcd $ETCD_VERSION, kubernetes $K8S_VERSION, kwok $KWOK_VERSION) into $BIN"
  # Each into a temporary name first, so an interrupted build leaves nothing half-made.
  if [[ $need == *" etcd "* ]]; then
    (cd "$MODS/etcd" && go build -trimpath -ldflags "-s -w" -o "$BIN/etcd.tmp" .) >&2
    mv "$BIN/etcd.tmp" "$BIN/etcd"
  fi
  if [[ $need == *" kwok "* ]]; then
    (cd "$MODS/kwok" && go build -trimpath \
      -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION" \
      -o "$BIN/kwok.tmp" sigs.k8s.io/kwok/cmd/kwok) >&2
    mv "$BIN/kwok.tmp" "$BIN/kwok"
  fi
  if [[ $need == *" kube-"* ]]; then
    mkdir -p "$BIN/kube.tmp"
    (cd "$MODS/kube" && go build -trimpath -ldflags "$ldk" -o "$BIN/kube.tmp/" \
      k8s.io/kubernetes/cmd/kube-apiserver \
      k8s.io/kubernetes/cmd/kube-controller-manager \
      k8s.io/kubernetes/cmd/kube-scheduler) >&2
    mv "$BIN"/kube.tmp/* "$BIN"/
    rmdir "$BIN/kube.tmp"
  fi
  log "built in $((SECONDS - start)) s; $(du -sh "$BIN" | cut -f1) of binaries"
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

certs() {
  local dir=$1
  (
    cd "$dir"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3 \
      -subj "/CN=shoal-test-ca" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr \
      -subj "/CN=kube-apiserver" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default.svc\n' \
      >apiserver.ext
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3 \
      -extfile apiserver.ext -out apiserver.crt 2>/dev/null
    # The admin client: system:masters, for the tests' own set-up and the controllers.
    openssl req -newkey rsa:2048 -nodes -keyout admin.key -out admin.csr \
      -subj "/O=system:masters/CN=shoal-test-admin" 2>/dev/null
    openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3 \
      -out admin.crt 2>/dev/null
    # The service-account signing key (TokenRequest tokens, the token controller).
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  )
}

kubeconfig() {
  local dir=$1 port=$2
  cat >"$dir/admin.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: shoal-test
  cluster:
    server: https://127.0.0.1:$port
    certificate-authority: $dir/ca.crt
users:
- name: admin
  user:
    client-certificate: $dir/admin.crt
    client-key: $dir/admin.key
contexts:
- name: shoal-test
  context: {cluster: shoal-test, user: admin}
current-context: shoal-test
EOF
}

wait_for() {  # what, seconds, command...
  local what=$1 limit=$2 i
  shift 2
  for ((i = 0; i < limit * 4; i++)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.25
  done
  log "$what did not come up within ${limit}s"
  return 1
}

spawn() {  # name, command... (in the background, logged, pid recorded)
  local name=$1
  shift
  nohup "$@" >"$DIR/$name.log" 2>&1 &
  echo $! >"$DIR/$name.pid"
}

start() {
  if [ -n "$(missing)" ]; then build; fi
  DIR=$(mktemp -d "${TMPDIR:-/tmp}/shoal-cp.XXXXXX")
  echo "$DIR" >"$STATE"
  local etcd_port peer_port api_port kwok_port
  etcd_port=$(free_port)
  peer_port=$(free_port)
  api_port=$(free_port)
  kwok_port=$(free_port)
  certs "$DIR"
  kubeconfig "$DIR" "$api_port"
  local kc=$DIR/admin.kubeconfig
  trap 'log "start failed; logs in $DIR"; stop_dir "$DIR"' ERR

  spawn etcd "$BIN/etcd" --name default --data-dir "$DIR/etcd" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" \
    --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-cluster "default=http://127.0.0.1:$peer_port" \
    --unsafe-no-fsync --quota-backend-bytes 4294967296 --log-level warn
  wait_for etcd 60 curl -sf "http://127.0.0.1:$etcd_port/health"

  spawn kube-apiserver "$BIN/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$etcd_port" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$api_port" \
    --tls-cert-file "$DIR/apiserver.crt" --tls-private-key-file "$DIR/apiserver.key" \
    --client-ca-file "$DIR/ca.crt" \
    --service-account-issuer https://kubernetes.default.svc \
    --service-account-key-file "$DIR/sa.pub" \
    --service-account-signing-key-file "$DIR/sa.key" \
    --authorization-mode RBAC --allow-privileged=true \
    --enable-admission-plugins OwnerReferencesPermissionEnforcement \
    --service-cluster-ip-range 10.96.0.0/16 \
    --max-requests-inflight 1000 --max-mutating-requests-inflight 500 \
    --endpoint-reconciler-type none --profiling=false --v 1 \
    --feature-gates "$FEATURE_GATES" --runtime-config scheduling.k8s.io/v1beta1=true
  wait_for kube-apiserver 120 curl -sf --cacert "$DIR/ca.crt" --cert "$DIR/admin.crt" \
    --key "$DIR/admin.key" "https://127.0.0.1:$api_port/readyz"

  # Only the controllers the tests need: garbage collection (owner references), namespace
  # deletion, default ServiceAccounts (pods need one), ResourceQuota status (its admission
  # needs it), Deployments/ReplicaSets/Jobs (the chart, foreign pods), root CA ConfigMaps,
  # node lifecycle (it lifts the not-ready taint admission puts on every new node once
  # the node is Ready, and taints NotReady ones; kwok renews the node Leases), the
  # PersistentVolume binder (claims bound to volumes: a foreign pod's volume affinity),
  # and the ResourceClaim controller: it makes the claims a pod's resourceClaimTemplates
  # ask for and deletes them with the pod, and deallocates a claim (clears its
  # reservedFor and allocation) once the pods it was reserved for are done or gone; and
  # the PodGroup protection controller, which lifts a deleted PodGroup's finalizer once
  # none of its pods is active; and the disruption controller, which writes a
  # PodDisruptionBudget's status (disruptionsAllowed), which evictions are judged by.
  spawn kube-controller-manager "$BIN/kube-controller-manager" \
    --kubeconfig "$kc" --authentication-kubeconfig "$kc" --authorization-kubeconfig "$kc" \
    --bind-address 127.0.0.1 --secure-port 0 \
    --controllers garbage-collector-controller,namespace-controller,serviceaccount-controller,resourcequota-controller,replicaset-controller,deployment-controller,job-controller,root-ca-certificate-publisher-controller,node-lifecycle-controller,persistentvolume-binder-controller,resourceclaim-controller,podgroup-protection-controller,disruption-controller \
    --feature-gates "$FEATURE_GATES" \
    --root-ca-file "$DIR/ca.crt" --service-account-private-key-file "$DIR/sa.key" \
    --concurrent-gc-syncs 20 --kube-api-qps 200 --kube-api-burst 400 --leader-elect=false --v 1

  spawn kwok "$BIN/kwok" --kubeconfig "$kc" --config "$MODS/kwok/stages.yaml" \
    --manage-all-nodes=false --manage-nodes-with-label-selector type=kwok \
    --server-address "127.0.0.1:$kwok_port" --cidr 10.244.0.1/16 --node-ip 127.0.0.1
  wait_for kwok 60 curl -sf "http://127.0.0.1:$kwok_port/healthz"

  if [ "${SHOAL_CONTROLPLANE_SCHEDULER:-0}" = 1 ]; then
    spawn kube-scheduler "$BIN/kube-scheduler" --kubeconfig "$kc" \
      --authentication-kubeconfig "$kc" --authorization-kubeconfig "$kc" \
      --bind-address 127.0.0.1 --secure-port 0 --leader-elect=false \
      --kube-api-qps 500 --kube-api-burst 1000 --feature-gates "$FEATURE_GATES" --v 1
  fi
  # The default ServiceAccount appears in a namespace only once the controller runs.
  wait_for "default ServiceAccount" 60 "$(kubectl_bin)" --kubeconfig "$kc" get serviceaccount default
  trap - ERR
  print_env "$DIR"
}

kubectl_bin() {
  command -v kubectl || echo "$ROOT/.tools/bin/kubectl"
}

# `start` prints no KUBECONFIG: scripts/test.sh evals it for the whole suite, and a test
# that falls back to KUBECONFIG must not reach this cluster by accident. `env` adds it.
print_env() {
  local dir=$1
  echo "export SHOAL_CONTROLPLANE_DIR=$dir"
  echo "export SHOAL_CONTROLPLANE_KUBECONFIG=$dir/admin.kubeconfig"
  echo "export SHOAL_CONTROLPLANE_BIN=$BIN"
}

env_() {
  [ -f "$STATE" ] && [ -d "$(cat "$STATE")" ] || { log "not running"; exit 1; }
  print_env "$(cat "$STATE")"
  echo "export KUBECONFIG=$(cat "$STATE")/admin.kubeconfig"
}

stop_dir() {
  local dir=$1 name pid
  for name in kube-scheduler kwok kube-controller-manager kube-apiserver etcd; do
    [ -f "$dir/$name.pid" ] || continue
    pid=$(cat "$dir/$name.pid")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -9 "$pid" 2>/dev/null || true
  done
  rm -rf "$dir"
  rm -f "$STATE"
}

stop() {
  local dir=${SHOAL_CONTROLPLANE_DIR:-}
  if [ -z "$dir" ] && [ -f "$STATE" ]; then dir=$(cat "$STATE"); fi
  if [ -z "$dir" ] || [ ! -d "$dir" ]; then
    log "nothing to stop"
    return 0
  fi
  stop_dir "$dir"
}

case "${1:-}" in
  build) build ;;
  start) start ;;
  stop) stop ;;
  env) env_ ;;
  bin) echo "$BIN" ;;
  *) echo "usage: $0 build|start|stop|env|bin" >&2; exit 2 ;;
esac
