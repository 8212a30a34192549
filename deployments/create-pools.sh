#!/bin/sh
# Create the two work pools with this repository's base job templates, replacing whatever a
# worker created first (a worker that starts before its pool exists creates it with Prefect's
# default template). Safe to run again.
#
#   sh deployments/create-pools.sh                        # both pools `process` (compose, one host)
#   GPU_POOL_TYPE=docker sh deployments/create-pools.sh   # training in containers (docker-gpu.json)
#   GPU_POOL_TYPE=kubernetes sh deployments/create-pools.sh
set -eu
here=$(cd "$(dirname "$0")" && pwd)
gpu_type=${GPU_POOL_TYPE:-process}
case "$gpu_type" in
  process) gpu_template=process.json ;;
  docker) gpu_template=docker-gpu.json ;;
  kubernetes) gpu_template=kubernetes-gpu.json ;;
  *) echo "GPU_POOL_TYPE must be process, docker or kubernetes, not '$gpu_type'" >&2; exit 2 ;;
esac
prefect --no-prompt work-pool create consolidation-cpu --type process \
  --base-job-template "$here/work-pools/process.json" --overwrite
prefect --no-prompt work-pool create consolidation-gpu --type "$gpu_type" \
  --base-job-template "$here/work-pools/$gpu_template" --overwrite
