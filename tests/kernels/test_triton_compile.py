"""The Triton kernels compile for a CUDA target (sm_90) down to LLVM IR, with no GPU present.

The interpreter (test_triton_interpret.py) checks the numbers but accepts Python the compiler
rejects (globals, scalars whose type changes in a loop); this catches those before a device run.
It uses Triton's compiler stages directly, so it skips when that internal API moves.
"""

from __future__ import annotations

import os

import pytest

triton = pytest.importorskip("triton")
if os.environ.get("TRITON_INTERPRET") == "1":
    pytest.skip("the interpreter replaces the compiler", allow_module_level=True)

try:
    from triton._C.libtriton import ir
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import CUDABackend
    from triton.compiler import ASTSource
except ImportError as exc:  # pragma: no cover - depends on the Triton version
    pytest.skip(f"Triton's compiler API moved: {exc}", allow_module_level=True)

from arena_core.kernels import triton_row_ops  # noqa: E402

KERNELS = {
    "_stats_kernel": {"z_ptr": "*fp32", "targets_ptr": "*i64", "lse_ptr": "*fp32"},
    "_softmax_grad_kernel": {"logp_ptr": "*fp32", "out_ptr": "*fp32", "targets_ptr": "*i64"},
}


def _signature(fn, known, constexprs):
    sig = {}
    for name in fn.arg_names:
        if name in constexprs:
            sig[name] = "constexpr"
        elif name.endswith("_ptr"):
            sig[name] = known.get(name, "*fp32")
        else:
            sig[name] = "i32"
    return sig


@pytest.mark.parametrize("kernel", sorted(KERNELS))
@pytest.mark.parametrize("with_entropy", [False, True])
def test_kernel_compiles_to_llvm_ir_for_sm90(kernel, with_entropy):
    fn = getattr(triton_row_ops, kernel)
    target = GPUTarget("cuda", 90, 32)
    backend = CUDABackend(target)
    options = backend.parse_options({"num_warps": 8})
    constexprs = {"WITH_ENTROPY": with_entropy, "BLOCK_V": 4096}
    src = ASTSource(
        fn=fn,
        signature=_signature(fn, KERNELS[kernel], constexprs),
        constexprs={(fn.arg_names.index(k),): v for k, v in constexprs.items()},
    )
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    codegen = backend.get_codegen_implementation(options)
    module = src.make_ir(target, options, codegen, backend.get_module_map(), context)
    stages: dict = {}
    backend.add_stages(stages, options, src.language)
    for stage in ("ttir", "ttgir", "llir"):
        module = stages[stage](module, {})
    assert "define" in module  # an LLVM function came out
