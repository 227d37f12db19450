#!/usr/bin/env bash
# Builds core, the CLI, the core tests and the libFuzzer targets with clang, AddressSanitizer
# and UndefinedBehaviorSanitizer (into build-asan/); runs the core tests and the CLI tests
# under them; replays every input that once crashed a reader (fuzz/regressions/); then fuzzes
# each reader of outside bytes (files, input specs, the attach wire) from seeds made of the fixtures: in CI a fixed seed and number of
# runs (reproducible); FUZZ_SECONDS=N fuzzes each for N seconds with a random seed instead.
set -euo pipefail
source "$(dirname "$0")/common.sh"
# --build-only: the build alone (scripts/test.sh compiles it beside ctest, after its own setup).
build_only=0
[ "${1:-}" = --build-only ] && build_only=1
[ "$build_only" = 1 ] || "$root/scripts/setup.sh"
build="$root/build-asan"
# Line tables only: what a report's stack needs, at less compile time than full debug information.
"$cmake" -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -gline-tables-only -DNDEBUG" \
  -DHOOKSCOPE_FUZZ=ON -DHOOKSCOPE_BUILD_GUI=OFF -DHOOKSCOPE_PYTHON="$python" "${cmake_launcher[@]}" >/dev/null
"$cmake" --build "$build" -j2 --target hookscope_core_tests hookscope_cuda_kernel_tests hookscope-cli hookscope_test_ops \
  ExportReaderFuzz DataFileFuzz PickleShapeFuzz ModelArchiveFuzz InputSpecFuzz AttachWireFuzz ModelFileKindFuzz
[ "$build_only" = 1 ] && exit 0
ops="$build/tests/libhookscope_test_ops.so"
fixtures=$(HOOKSCOPE_TEST_OPS="$ops" stage_fixtures "$build/fixtures")
# LibTorch keeps its registries until exit on purpose: leaks are not what this stage looks for.
# allocator_may_return_null: a model that asks for terabytes gets the failed allocation LibTorch
# reports (and HookScope explains), as in the release build, instead of ASan's own abort.
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:allocator_may_return_null=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export HOOKSCOPE_FIXTURES="$fixtures" HOOKSCOPE_TEST_OPS="$ops"
"$build/tests/hookscope_core_tests" --gtest_brief=1
# The CUDA kernels' own source run as host C++: a read past a buffer or an overflow in them is
# found here, as compute-sanitizer would on a GPU.
"$build/tests/hookscope_cuda_kernel_tests" --gtest_brief=1 --gtest_filter=-*OffsetsPast2To31*  # that one: 2 GB, minutes here
(cd "$root/tests/python" && HOOKSCOPE_CLI="$build/cli/hookscope-cli" HOOKSCOPE_MODELS="$root/resources/models" \
  "$python" -m unittest -q test_cli && HOOKSCOPE_CLI="$build/cli/hookscope-cli" "$python" -m pytest -q -p no:cacheprovider test_attach.py test_distributed.py)

# Seeds: the fixtures' data files, every file of a real export, a few input specs.
corpus="$build/corpus"
rm -rf "$corpus" && mkdir -p "$corpus"/{DataFileFuzz,PickleShapeFuzz,ModelArchiveFuzz,ExportReaderFuzz,InputSpecFuzz,AttachWireFuzz}
cp "$fixtures"/*.data.pt "$fixtures"/bad/*.data.pt "$corpus/DataFileFuzz/"
# The data.pkl inside each fixture data file (but the 200,000-deep one, slow to mutate).
"$python" - "$corpus/PickleShapeFuzz" "$fixtures"/*.data.pt "$fixtures/bad/cycle.data.pt" <<'PY'
import os, sys, zipfile
for path in sys.argv[2:]:
    with zipfile.ZipFile(path) as z:
        for name in z.namelist():
            if name.endswith("/data.pkl"):
                with open(os.path.join(sys.argv[1], os.path.basename(path) + ".pkl"), "wb") as out:
                    out.write(z.read(name))
PY
seed_export="$build/seed-export"
rm -rf "$seed_export"
"$build/cli/hookscope-cli" capture "$root/resources/models/small_cnn.pt" --out "$seed_export" --steps 2 \
  --hook 'fc*' >/dev/null 2>&1
i=0
for name in manifest.json stats.csv scalars.csv histograms.pt alerts.csv; do
  { printf "\\x$(printf %02x $i)"; cat "$seed_export/$name"; } > "$corpus/ExportReaderFuzz/$name"
  i=$((i + 1))
done
# histograms.pt with a storage record cut short (the pickle still claims its full size), and the
# same dict as PyTorch's own torch.save writes it.
"$python" - "$seed_export/histograms.pt" "$corpus/ExportReaderFuzz" <<'PY'
import os, sys, zipfile, torch
source, folder = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(source) as z:
    records = {n: z.read(n) for n in z.namelist()}
storage = sorted(n for n in records if "/data/" in n)[0]
records[storage] = records[storage][:8]
short = os.path.join(folder, "histograms-short.pt.tmp")
with zipfile.ZipFile(short, "w", zipfile.ZIP_STORED) as z:
    for n, data in records.items():
        z.writestr(n, data)
resaved = os.path.join(folder, "histograms-resaved.pt.tmp")
torch.save(torch.load(source, weights_only=True), resaved)
for path in (short, resaved):
    with open(path, "rb") as f, open(path[:-4], "wb") as out:
        out.write(b"\x03" + f.read())
    os.remove(path)
PY
for spec in 8x1x28x28 8x128:int64:0:30000 2x3:float16:-1:1 4x4:bool 1x2:float64:-1e300:1e300; do
  printf '%s' "$spec" > "$corpus/InputSpecFuzz/$spec"
done
# Model archives (first byte even) and their code records as text (first byte odd).
for model in "$root/resources/models/small_cnn.pt" "$fixtures/custom_op.pt" "$fixtures/bad/setstate_from_file.pt"; do
  { printf '\x00'; cat "$model"; } > "$corpus/ModelArchiveFuzz/$(basename "$model")"
  "$python" - "$model" "$corpus/ModelArchiveFuzz/$(basename "$model").code" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, open(sys.argv[2], "wb") as out:
    out.write(b"\x01" + b"".join(z.read(n) for n in z.namelist() if n.endswith(".py")))
PY
done
"$python" "$root/fuzz/make_attach_seeds.py" "$corpus/AttachWireFuzz"
# Model files of every kind (first byte odd) and their pickles (first byte even).
mkdir -p "$corpus/ModelFileKindFuzz"
"$python" - "$corpus/ModelFileKindFuzz" "$root/resources/models/small_cnn.pt" "$fixtures" <<'PY'
import os, sys, zipfile
out, sample, fixtures = sys.argv[1:4]
files = [sample, os.path.join(fixtures, "bad", "eager_zip.pt"), os.path.join(fixtures, "twice_inplace_exported.pt2"),
         os.path.join(fixtures, "teacher.data.pt")]
for path in files:
    if not os.path.exists(path):
        continue
    name = os.path.basename(path)
    with open(path, "rb") as f:
        data = f.read()
    with open(os.path.join(out, name + ".file"), "wb") as f:
        f.write(b"\x01" + data)
    with zipfile.ZipFile(path) as z:
        for record in z.namelist():
            if record.endswith(".pkl"):
                with open(os.path.join(out, name + "." + record.replace("/", "_")), "wb") as f:
                    f.write(b"\x00" + z.read(record))
header = b'{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}'
with open(os.path.join(out, "tiny.safetensors"), "wb") as f:
    f.write(b"\x01" + len(header).to_bytes(8, "little") + header + bytes(8))
PY
# The held-out sweep's bad exports and safetensors files, as seeds (each must still be handled).
"$python" "$root/fuzz/make_sweep_seeds.py" "$seed_export" "$corpus"
declare -A runs=([ExportReaderFuzz]=4000 [DataFileFuzz]=1500 [PickleShapeFuzz]=200000 [ModelArchiveFuzz]=5000
                 [InputSpecFuzz]=400000 [AttachWireFuzz]=20000 [ModelFileKindFuzz]=20000)
for target in ExportReaderFuzz DataFileFuzz PickleShapeFuzz ModelArchiveFuzz InputSpecFuzz AttachWireFuzz \
              ModelFileKindFuzz; do
  budget=(-seed=1 -runs="${runs[$target]}")
  [ -n "${FUZZ_SECONDS:-}" ] && budget=(-max_total_time="$FUZZ_SECONDS")
  regressions="$root/fuzz/regressions/$target"
  mkdir -p "$build/crashes"
  # Every input that once crashed this reader must still be handled.
  if [ -d "$regressions" ]; then
    "$build/fuzz/$target" -runs=0 "$regressions"/* >/dev/null 2>&1 || {
      echo "asan.sh: $target fails on a saved regression input in $regressions" >&2; exit 1; }
  fi
  echo "fuzzing $target (${budget[*]})" >&2
  "$build/fuzz/$target" "${budget[@]}" -timeout=20 -rss_limit_mb=4096 \
    -artifact_prefix="$build/crashes/$target-" "$corpus/$target" 2>"$build/$target.log" || {
    tail -40 "$build/$target.log" >&2
    echo "asan.sh: $target found a crash: $(ls "$build/crashes/$target-"* 2>/dev/null | head -1);" \
         "keep it in $regressions once fixed" >&2
    exit 1
  }
  grep -E "^Done|^#[0-9]+.*DONE" "$build/$target.log" | tail -1 >&2 || true
done
