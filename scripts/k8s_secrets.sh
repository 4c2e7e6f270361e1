#!/usr/bin/env bash
# Creates the Secrets the Kubernetes manifests read, in one namespace, leaving every one that
# already exists as it is (re-running it changes nothing: the admin token is not rotated, the
# dev stores keep the passwords they were started with):
#   chat-admin   token: the admin API's token (random unless CHAT_ADMIN_TOKEN is set)
#   chat-store   url:   the store's URL, credentials included (CHAT_STORE_URL)
#   chat-redis   url:   Redis's URL, credentials included (CHAT_REDIS_URL)
#   chat-hf      token: a Hugging Face token for gated weights (HF_TOKEN; skipped if unset)
#   chat-etcd-ca tls.crt, tls.key: the external etcd's CA (CHAT_ETCD_CA_CERT, CHAT_ETCD_CA_KEY:
#                files), from which cert-manager issues the schedulers' etcd client certificate
# With --dev, for the dev overlay's in-cluster stores, it also makes their passwords
# (chat-postgres-password, chat-redis-password) and the two URLs that use them (a password
# that exists is read back, so a missing URL is made with it); its etcd's CA is cert-manager's.
# The certificates' Secrets are cert-manager's (deploy/k8s/base/certificates.yaml).
# To change a value: `kubectl -n NAMESPACE delete secret NAME`, then run this again.
# --print writes every Secret as YAML, fresh, without looking at the cluster.
#
#   scripts/k8s_secrets.sh --dev chat-dev
#   CHAT_STORE_URL=postgresql://chat:...@db:5432/chat CHAT_REDIS_URL=rediss://:...@cache:6379/0 \
#     CHAT_ETCD_CA_CERT=etcd-ca.crt CHAT_ETCD_CA_KEY=etcd-ca.key scripts/k8s_secrets.sh chat
set -euo pipefail
dev=false
print=false
namespace=""
for arg in "$@"; do
  case "$arg" in
    --dev) dev=true ;;
    --print) print=true ;;
    -*) echo "unknown option $arg" >&2; exit 2 ;;
    *) namespace="$arg" ;;
  esac
done
if [ -z "$namespace" ]; then
  echo "usage: $0 [--dev] [--print] NAMESPACE" >&2
  exit 2
fi
random() { head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
# Whether Secret $1 exists; a cluster that cannot be asked stops the script.
exists() {
  local found
  if $print; then
    return 1
  fi
  found="$(kubectl get secret "$1" --namespace "$namespace" --ignore-not-found -o name)" || {
    echo "cannot read the Secrets of namespace $namespace" >&2
    exit 1
  }
  [ -n "$found" ]
}
# Key $2 of Secret $1 if it exists, else $3: a value the running stores already use.
kept_or() {
  if exists "$1"; then
    kubectl get secret "$1" --namespace "$namespace" -o "jsonpath={.data.$2}" | base64 -d
  else
    printf '%s' "$3"
  fi
}

admin_token="${CHAT_ADMIN_TOKEN:-$(random)}"
if $dev; then
  postgres_password="$(kept_or chat-postgres-password password "$(random)")"
  redis_password="$(kept_or chat-redis-password password "$(random)")"
  store_url="postgresql://chat:${postgres_password}@postgres:5432/chat"
  redis_url="redis://:${redis_password}@redis:6379/0"
else
  store_url="${CHAT_STORE_URL:-}"
  redis_url="${CHAT_REDIS_URL:-}"
  if [ -z "$store_url" ] || [ -z "$redis_url" ]; then
    echo "set CHAT_STORE_URL (postgresql://USER:PASSWORD@HOST:5432/DB) and" \
      "CHAT_REDIS_URL (redis[s]://:PASSWORD@HOST:6379/0), or pass --dev" >&2
    exit 2
  fi
  if [ ! -r "${CHAT_ETCD_CA_CERT:-}" ] || [ ! -r "${CHAT_ETCD_CA_KEY:-}" ]; then
    echo "set CHAT_ETCD_CA_CERT and CHAT_ETCD_CA_KEY to the files of the CA that signs" \
      "etcd's certificate and the certificates it takes from clients, or pass --dev" >&2
    exit 2
  fi
fi

out="$(mktemp)"
trap 'rm -f "$out"' EXIT
# Secret $1 (kubectl create secret's arguments after it) into $out, unless it exists.
secret() {
  if exists "$2"; then
    echo "kept secret/$2 (exists)" >&2
    return
  fi
  echo "---" >> "$out"
  kubectl create secret "$1" "$2" --namespace "$namespace" "${@:3}" --dry-run=client -o yaml \
    >> "$out"
}
secret generic chat-admin --from-literal=token="$admin_token"
secret generic chat-store --from-literal=url="$store_url"
secret generic chat-redis --from-literal=url="$redis_url"
if [ -n "${HF_TOKEN:-}" ]; then
  secret generic chat-hf --from-literal=token="$HF_TOKEN"
fi
if $dev; then
  secret generic chat-postgres-password --from-literal=password="$postgres_password"
  secret generic chat-redis-password --from-literal=password="$redis_password"
else
  secret tls chat-etcd-ca --cert="$CHAT_ETCD_CA_CERT" --key="$CHAT_ETCD_CA_KEY"
fi
if $print; then
  cat "$out"
elif [ -s "$out" ]; then
  # create, not apply: what exists was left out above, and must not be overwritten.
  kubectl create -f "$out"
fi
