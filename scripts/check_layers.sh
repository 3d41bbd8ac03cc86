#!/usr/bin/env bash
# Module boundaries (docs/ARCHITECTURE.md): dependencies point down only, core <- ops <- nn <- model <- train,
# dist <- train (dist sees core only),
# CUDA headers appear only in ops/cuda and core/*_cuda.* files, nlohmann-json only in core/json.cpp.
# Fails naming each violation.
set -uo pipefail
cd "$(dirname "$0")/.."
bad=0
check() {  # check DIR FORBIDDEN_INCLUDE_REGEX
  local hits
  hits=$(grep -rnE "#include \"($2)/" "src/$1" 2>/dev/null || true)
  if [ -n "$hits" ]; then
    echo "check_layers: src/$1 must not include $2:"
    echo "$hits"
    bad=1
  fi
}
check core 'ops|nn|model|train|data|checkpoint|dist'
check ops 'nn|model|train|data|checkpoint|dist'
check nn 'model|train|data|checkpoint'
check model 'train|data|checkpoint'
check data 'ops|nn|model|train|checkpoint'
check checkpoint 'ops|nn|train|data|dist'
check dist 'ops|nn|model|train|data|checkpoint'
check interop 'ops|nn|train|data|dist'
# The library never parses argv: nothing under src/ includes the CLI (tools/cli).
cli=$(grep -rnE '#include "cli/' src || true)
if [ -n "$cli" ]; then
  echo "check_layers: src/ must not include the CLI (tools/cli):"
  echo "$cli"
  bad=1
fi
cuda=$(grep -rlnE '#include <(cuda|cublas|cudnn|nccl)' src |
  grep -vE '^src/ops/cuda/|^src/core/[a-z_]*_cuda\.(cu|h|cuh)$|^src/dist/nccl_communicator\.cpp$' || true)
if [ -n "$cuda" ]; then
  echo "check_layers: CUDA headers outside src/ops/cuda, src/core/*_cuda.* and src/dist/nccl_communicator.cpp:"
  echo "$cuda"
  bad=1
fi
# MPI stays inside the dist backends (mpi_communicator.cpp, world.cpp).
mpi=$(grep -rlnE '#include <mpi' src tools | grep -vxE 'src/dist/(mpi_communicator|world)\.cpp' || true)
if [ -n "$mpi" ]; then
  echo "check_layers: mpi.h included outside src/dist/mpi_communicator.cpp and src/dist/world.cpp:"
  echo "$mpi"
  bad=1
fi
# nlohmann-json stays behind core/json.h (no third-party types in headers, none for nvcc).
nlohmann=$(grep -rlnE '#include <nlohmann/' src tools | grep -vx 'src/core/json.cpp' || true)
if [ -n "$nlohmann" ]; then
  echo "check_layers: nlohmann-json included outside src/core/json.cpp:"
  echo "$nlohmann"
  bad=1
fi
[ $bad -eq 0 ] && echo "check_layers: ok"
exit $bad
