"""experiments/bench/kernel_classes.py: a profile's kernels summed by kind, and what limits the step."""

import pytest

from experiments.bench import kernel_classes as kc


@pytest.mark.parametrize("name, kind", [
    ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "matmul"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_16x6_nn_align4>(cutlass_80_tenso", "matmul"),
    ("void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, __nv_bfloat16", "matmul"),
    ("aten::addmm", "matmul"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x64_1x4x1_cga1x1x", "attention"),
    ("void at::native::(anonymous namespace)::layer_norm_grad_input_kernel_vectorized<float, flo", "norm"),
    ("void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernelTemplate<float, float, ", "norm"),
    ("void at::native::(anonymous namespace)::conv_depthwise2d_forward_kernel_generic<c10::BFloa", "conv"),
    ("triton_poi_fused__to_copy_add_clamp_min_convolution_backward_0", "inductor fused"),
    ("chunk_gla_bwd_kernel_intra", "mixer kernels"),
    ("chunk_gated_delta_rule_fwd_kernel_h_blockdim64", "mixer kernels"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std:", "elementwise and copies"),
    ("void at::native::(anonymous namespace)::CatArrayBatchedCopy_vectorized<at::native::(anonym", "elementwise and copies"),
    ("Memcpy DtoD (Device -> Device)", "elementwise and copies"),
    ("aten::mul", "elementwise and copies"),
])
def test_each_kernel_name_gets_its_kind(name, kind):
    assert kc.classify(name) == kind


def test_by_kind_sums_and_shares_and_names_what_is_not_listed():
    ops = [("nvjet_a", 10.0), ("nvjet_b", 5.0), ("void at::native::elementwise_kernel<1>", 20.0), ("chunk_x", 5.0)]
    kinds = kc.by_kind(ops)
    assert [(k["kind"], k["ms_per_step"], k["share"]) for k in kinds] == [
        ("elementwise and copies", 20.0, 0.5), ("matmul", 15.0, 0.375), ("mixer kernels", 5.0, 0.125)]
    assert kc.limit_line(kinds) == "limited by elementwise and copies: 50% of the profiled step"
    partial = kc.by_kind(ops, total=80.0)  # a file that lists only the top kernels of an 80 ms step
    assert partial[-1] == {"kind": "below the top 15", "ms_per_step": 40.0, "share": 0.5}
    assert partial[0]["share"] == 0.25


def test_report_reads_a_profile_file_and_a_later_table_of_a_row_wins(tmp_path):
    path = tmp_path / "paper_scale_profile_x.md"
    path.write_text("# Per-op profile\n\n## gla:3:1\n\n| op | calls/step | ms/step | share |\n|---|---|---|---|\n"
                    "| `nvjet_a` | 4 | 30.0 | 30.0% |\n| `void at::native::elementwise_kernel<4>` | 9 | 20.0 | 20.0% |\n\n"
                    "## gla:3:1@composed\n\n| op | calls/step | ms/step | share |\n|---|---|---|---|\n"
                    "| `chunk_gla_fwd` | 4 | 10.0 | 50.0% |\n")
    tables = kc.read_profile(path)
    assert list(tables) == ["gla:3:1", "gla:3:1@composed"] and tables["gla:3:1"][1] == (
        "void at::native::elementwise_kernel<4>", 20.0, 0.2)
    text = kc.report(path)
    line = next(x for x in text.splitlines() if x.startswith("| gla:3:1 |"))
    # matmul 30% | attention | norm | mixer | conv | elementwise 20% | inductor | below the top 15: 50%
    assert line.startswith("| gla:3:1 | 30% |  |  |  |  | 20% |  | 50% | limited by matmul: 30%")
    assert "| gla:3:1@composed |  |  |  | 50% |" in text


def test_bad_input_is_one_line(tmp_path):
    with pytest.raises(SystemExit, match="cannot read"):
        kc.read_profile(tmp_path / "missing.md")
    empty = tmp_path / "e.md"
    empty.write_text("# nothing here\n")
    with pytest.raises(SystemExit, match="holds no profile table"):
        kc.read_profile(empty)
