#!/usr/bin/env bash
# Creates (or replaces) the Secrets the Kubernetes manifests read, in one namespace:
#   chat-admin   token: the admin API's token (random unless CHAT_ADMIN_TOKEN is set)
#   chat-store   url:   the store's URL, credentials included (CHAT_STORE_URL)
#   chat-redis   url:   Redis's URL, credentials included (CHAT_REDIS_URL)
#   chat-hf      token: a Hugging Face token for gated weights (HF_TOKEN; skipped if unset)
#   chat-etcd-ca tls.crt, tls.key: the external etcd's CA (CHAT_ETCD_CA_CERT, CHAT_ETCD_CA_KEY:
#                files), from which cert-manager issues the schedulers' etcd client certificate
# With --dev, for the dev overlay's in-cluster stores, it also makes their passwords
# (chat-postgres-password, chat-redis-password) and the two URLs that use them; its etcd's CA
# is cert-manager's.
# The certificates' Secrets are cert-manager's (deploy/k8s/base/certificates.yaml).
# --print writes the Secrets as YAML instead of applying them.
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

admin_token="${CHAT_ADMIN_TOKEN:-$(random)}"
if $dev; then
  postgres_password="$(random)"
  redis_password="$(random)"
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
secret() {
  kubectl create secret generic "$1" --namespace "$namespace" "${@:2}" --dry-run=client -o yaml
}
{
  secret chat-admin --from-literal=token="$admin_token"
  echo "---"
  secret chat-store --from-literal=url="$store_url"
  echo "---"
  secret chat-redis --from-literal=url="$redis_url"
  if [ -n "${HF_TOKEN:-}" ]; then
    echo "---"
    secret chat-hf --from-literal=token="$HF_TOKEN"
  fi
  if ! $dev; then
    echo "---"
    kubectl create secret tls chat-etcd-ca --namespace "$namespace" \
      --cert="$CHAT_ETCD_CA_CERT" --key="$CHAT_ETCD_CA_KEY" --dry-run=client -o yaml
  fi
  if $dev; then
    echo "---"
    secret chat-postgres-password --from-literal=password="$postgres_password"
    echo "---"
    secret chat-redis-password --from-literal=password="$redis_password"
  fi
} > "$out"
if $print; then
  cat "$out"
else
  kubectl apply -f "$out"
fi
