"""Tests for scripts/kernel_times.py: parsing Nsight Compute csv, kernel families, errors."""
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "kernel_times.py"
sys.path.insert(0, str(SCRIPT.parent))
import kernel_times  # noqa: E402

# ncu --csv --print-units base: a preamble, then one row per (kernel launch, metric); durations in ns,
# with thousands separators.
HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
          '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')


def row(i, name, ns, metric="gpu__time_duration.sum"):
    return f'"{i}","1","train","h","{name}","1","7","(256, 1, 1)","(8, 1, 1)","0","9.0","Command line profiler metrics","{metric}","ns","{ns}"'


def sample_csv():
    lines = ["==PROF== Connected to process 1", HEADER,
             row(0, "nvjet_sm90_qqtst_128x128_128x6_1x2_h_bz_coopA_algo2_bias_TNT", "1,500,000"),
             row(1, "nvjet_sm90_qqtst_128x128_128x6_1x2_h_bz_coopA_algo2_bias_TNT", "500000"),
             row(2, "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "2,000,000"),
             row(3, "void attn_bwd_dq_tc_kernel<64, 1, 4, 64, 1>(__nv_bfloat16 *, float *)", "3000000"),
             row(4, "void fp8q_quantize_transpose_kernel<__nv_bfloat16, 1, 0, 0>(unsigned char *)", "250,000"),
             row(5, "gemm_gelu_backward_kernel(__nv_bfloat16 *, const __nv_bfloat16 *, unsigned long, unsigned int *)", "750000"),
             row(6, "some_unknown_kernel()", "1000000"),
             row(6, "some_unknown_kernel()", "99", metric="sm__cycles_elapsed.avg")]
    return "\n".join(lines) + "\n"


def test_rows_are_summed_in_ms_and_other_metrics_ignored():
    rows = list(kernel_times.read_rows(sample_csv()))
    assert len(rows) == 7
    assert rows[0] == ("nvjet_sm90_qqtst_128x128_128x6_1x2_h_bz_coopA_algo2_bias_TNT", 1.5)
    assert sum(ms for _, ms in rows) == pytest.approx(9.0)


@pytest.mark.parametrize("name, family", [
    ("nvjet_sm90_qrtst_128x160_128x5_2x1_v_bz_coopA_algo2_TNT", "FP8 GEMM (cuBLASLt)"),
    ("nvjet_sm90_tst_192x192_64x4_2x1_v_bz_coopB_TNN", "BF16 GEMM (cuBLASLt, CUTLASS)"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_dgelu_bf16_128x128_64x3_nn_align8>(T1::Params)",
     "BF16 GEMM (cuBLASLt, CUTLASS)"),
    ("void attn_fwd_tc_kernel<64, 2, 4, 64, 1, 0, 0>(__nv_bfloat16 *)", "attention"),
    ("fp8q_amax_finalize_kernel(const unsigned int *, int)", "FP8 quantization and amax"),
    ("void layernorm_backward_kernel<32, 4, 1>(__nv_bfloat16 *)", "LayerNorm"),
    ("gemm_dbias_finish_kernel(__nv_bfloat16 *, const float *, int, int)", "bias gradient"),
    ("some_unknown_kernel()", "other"),
])
def test_families(name, family):
    assert kernel_times.family_of(name) == family


def test_cli_summary(tmp_path):
    f = tmp_path / "ncu.csv"
    f.write_text(sample_csv())
    out = subprocess.run([sys.executable, str(SCRIPT), "--csv", str(f), "--top", "3"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert "total 9.00 ms over 7 kernels" in out.stdout
    assert "| FP8 GEMM (cuBLASLt) | 2.00 | 22.2% |" in out.stdout
    assert "| attention | 3.00 | 33.3% |" in out.stdout
    listed = [l for l in out.stdout.splitlines() if l.strip() and l.split()[0].replace(".", "").isdigit()]
    assert len(listed) == 3 and "attn_bwd_dq_tc_kernel" in listed[0]


def test_csv_without_table_is_an_error(tmp_path):
    f = tmp_path / "empty.csv"
    f.write_text("==PROF== No kernels were profiled.\n")
    out = subprocess.run([sys.executable, str(SCRIPT), "--csv", str(f)], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "no ncu csv table" in out.stderr
