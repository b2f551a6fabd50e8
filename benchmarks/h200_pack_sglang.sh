#!/usr/bin/env bash
# Build the SGLang 0.5.16 bundle for the lent H200 (python3.12, torch 2.11.0+cu130, transformers
# 5.17.0 already there; no network): an installed site-packages tree, xz-compressed, that
# benchmarks/h200_sglang.py untars at /tmp/site and puts on the engine's PYTHONPATH.
#   bash benchmarks/h200_pack_sglang.sh          # -> .device/sgl/site.tar.xz (~45 MiB; .device/ is ignored)
# Run on a machine with PyPI access. Started from ../shared/gpu/pack-sglang.sh (2026-12-02); added
# here: datasets + multiprocess (the kit's stage 1-3 imports and SGLang's bench_serving need them).
set -euo pipefail
W=${W:-/tmp/sglw}          # holds the sglang, sglang-kernel and flashinfer wheels
B=${B:-/tmp/scr/bundle}
DEST=$(realpath -m "${DEST:-.device/sgl/site.tar.xz}")
PLAT="--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any"
mkdir -p "$W/dl" "$B"
# 1. wheels: sglang, its kernel wheel, flashinfer (no deps).
pip download -q --no-deps $PLAT -d "$W" sglang==0.5.16 sglang-kernel==0.4.5 flashinfer-python==0.6.14
# 2. Python deps the server's start-up path imports that the device lacks (found by importing
#    sglang.launch_server / http_server / scheduler / model_runner / models.qwen3 /
#    triton_backend / ngram_worker locally, with a CUDA-faking shim).
#    xgrammar and apache-tvm-ffi at sglang's pins; the others at the versions the local probe used.
pip download -q --no-deps $PLAT -d "$W/dl" \
  annotated-types==0.8.0 apache-tvm-ffi==0.1.11 cffi==2.1.1 compressed-tensors==0.20.1 dill==0.4.1 \
  distro==1.9.0 fastapi==0.165.0 gguf==0.19.0 ipython==9.18.1 jiter==0.19.0 jsonschema==4.26.0 \
  jsonschema-specifications==2025.9.1 loguru==0.7.3 msgspec==0.23.0 openai==2.6.1 \
  opentelemetry-api==1.45.2 orjson==3.13.0 partial-json-parser==0.2.1.1.post7 pybase64==1.5.1 \
  pydantic==2.14.4 pydantic-core==2.50.5 python-multipart==0.0.34 pyzmq==27.3.0 referencing==0.37.0 \
  rpds-py==2026.9.1 setproctitle==1.3.8 sniffio==1.3.1 soundfile==0.14.0 starlette==1.10.0 \
  traitlets==5.16.1 typing-inspection==0.4.5 uvicorn==0.54.0 xgrammar==0.2.1 torch_memory_saver==0.0.10 \
  datasets==4.8.5 multiprocess==0.70.18 sgl-deep-gemm==0.1.4.post1
rm -rf "$B/site"; mkdir -p "$B/site"
pip install -q --no-deps --no-compile --target "$B/site" --python-version 3.12 --implementation cp \
  --only-binary=:all: "$W"/dl/*.whl "$W"/flashinfer_python-0.6.14-py3-none-any.whl \
  "$W"/sglang-0.5.16-cp312-cp312-manylinux_2_34_x86_64.whl
# 3. sgl_kernel without FA3 (flash_ops, 1.1 GB), sm100/ (Blackwell), infllm_ops and flashmla_ops
#    (both loaded lazily / inside try); keeps sm90/common_ops.abi3.so and spatial_ops.
rm -rf "$B/sk"; mkdir -p "$B/sk"
unzip -q "$W"/sglang_kernel-0.4.5-cp310-abi3-manylinux2014_x86_64.whl -d "$B/sk" \
  -x 'sgl_kernel/flash_ops*' 'sgl_kernel/sm100/*' 'sgl_kernel/infllm_ops*' 'sgl_kernel/flashmla_ops*'
cp -a "$B"/sk/* "$B/site/"
# 4. transformers 5.17 (device) already registers 'qwen3_asr'; sglang 0.5.16 (pinned to 5.12.1)
#    registers it again without exist_ok and the import of sglang.srt.configs fails. Patch:
sed -i 's/^AutoConfig.register("qwen3_asr", Qwen3ASRConfig)$/AutoConfig.register("qwen3_asr", Qwen3ASRConfig, exist_ok=True)/;
        s/^AutoConfig.register("qwen3_asr_thinker", Qwen3ASRThinkerConfig)$/AutoConfig.register("qwen3_asr_thinker", Qwen3ASRThinkerConfig, exist_ok=True)/' \
  "$B/site/sglang/srt/configs/qwen3_asr.py"
grep -c exist_ok=True "$B/site/sglang/srt/configs/qwen3_asr.py"
# 5. trim what is never loaded at run time: static libs, headers, cu12 variants, __pycache__, bin/.
find "$B/site" -name '*.a' -delete
rm -rf "$B/site/xgrammar/include" "$B/site/bin"   # tvm_ffi imports libtvm_ffi_testing.so: keep it
rm -f "$B"/site/torch_memory_saver_hook_mode_*cu12*.so
find "$B/site" -name __pycache__ -prune -exec rm -rf {} +
du -sh "$B/site"
mkdir -p "$(dirname "$DEST")"
(cd "$B" && tar cf - site | xz -6 -T2 > "$DEST")   # 1.5 min on 2 cores; xz -t checks it
ls -la "$DEST"
xz -t "$DEST" && echo xz-ok
