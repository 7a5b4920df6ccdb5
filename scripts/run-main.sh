#!/usr/bin/env bash
# The main job: install dependencies, build, and tell a story with the default model.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh
model="${LOOM_SHARED:-../shared}/models/stories260K.gguf"
if [ ! -f "$model" ]; then
  echo "model not found: $model (see README: 'Getting a model')" >&2
  exit 1
fi
./build/bin/loom generate -m "$model" -p "Once upon a time" -n 128 --temp 0
