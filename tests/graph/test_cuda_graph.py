"""Networks built for the ``cuda`` target: every kernel's PTX is accepted by ptxas, and a small CNN's
emulated output (every kernel run with GPU semantics on the CPU) equals onnxruntime's within 1e-4 of
its largest magnitude. ResNet-18 (onnx.helper) and the light models shipped with onnx build for cuda;
those builds take long and are marked slow."""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from vtakit import graph as vg
from vtakit.compiler.backend.nvptx import ptxas_check
from vtakit.compiler.graph.cuda_module import CudaNetModule
from vtakit.compiler.graph.zoo import ModelBuilder, resnet18
from vtakit.errors import ArgumentError, DeviceError, GraphError

LIGHT_DIR = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
LIGHT = ["bvlc_alexnet", "zfnet512", "squeezenet", "shufflenet", "resnet50", "inception_v1"]


def small_cnn(seed: int = 0) -> onnx.ModelProto:
    """conv+BN+relu, max pool, a strided conv with a residual 1x1 shortcut, a depthwise conv, average
    pool, global pool, dense and softmax: every GPU schedule in one net, small enough to emulate."""
    b = ModelBuilder(seed)
    x = b.node("Relu", [b.batch_norm(b.conv("data", 3, 8, 3), 8)])
    x = b.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    y = b.node("Relu", [b.conv(x, 8, 16, 3, 2, bias=True)])
    x = b.node("Relu", [b.node("Add", [y, b.conv(x, 8, 16, 1, 2, [0, 0, 0, 0])])])
    x = b.node("Relu", [b.conv(x, 16, 16, 3, 1, group=16)])
    x = b.node("AveragePool", [x], kernel_shape=[2, 2], strides=[1, 1])
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x])], axis=1)
    w = b.constant(b.he_normal((10, 16), 16), "fc_w")
    bias = b.constant((b.rng.standard_normal(10) * 0.1).astype(np.float32), "fc_b")
    logits = b.node("Gemm", [x, w, bias], transB=1)
    b.nodes.append(helper.make_node("Softmax", [logits], ["prob"], axis=1))
    return b.model([helper.make_tensor_value_info("data", TensorProto.FLOAT, [1, 3, 12, 12])],
                   [helper.make_tensor_value_info("prob", TensorProto.FLOAT, [1, 10])], "small_cnn")


def _onnxruntime(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, {"data": x})[0]


def _ptxas_every_kernel(module: CudaNetModule, archs=("sm_80",)) -> int:
    """ptxas accepts every kernel program of ``module`` and reports each of its kernels; their count."""
    count = 0
    for program in module.gpu_kernels:
        for arch in archs:
            report = ptxas_check(program.get_source("ptx"), arch)
            assert sorted(k.name for k in report.kernels) == sorted(k.name for k in program.kernels)
        count += len(program.kernels)
    return count


@pytest.fixture(scope="module")
def cnn():
    model = small_cnn()
    return model, vg.build(vg.from_onnx(model), target="cuda")


def test_small_cnn_emulation_equals_onnxruntime(cnn):
    model, module = cnn
    assert isinstance(module, CudaNetModule) and module.target == "cuda"
    x = np.random.default_rng(3).standard_normal((1, 3, 12, 12)).astype(np.float32)
    (got,) = module.emulate({"data": x})
    want = _onnxruntime(model, x)
    assert np.max(np.abs(got - want)) <= 1e-4 * np.max(np.abs(want))


def test_small_cnn_kernels_pass_ptxas_for_sm80_and_sm90(cnn):
    _, module = cnn
    assert _ptxas_every_kernel(module, ("sm_80", "sm_90")) >= module.num_kernels


def test_int8_quantised_cnn_on_cuda_equals_the_cpu_build():
    rng = np.random.default_rng(5)
    q = vg.quantize(vg.from_onnx(small_cnn()), {"data": rng.standard_normal((4, 1, 3, 12, 12)).astype(np.float32)})
    module = vg.build(q, target="cuda")
    assert any(op.startswith("qnn.conv2d") for op in module.stats.fused_ops)
    x = rng.standard_normal((1, 3, 12, 12)).astype(np.float32)
    (got,) = module.emulate({"data": x})
    (want,) = vg.build(q, target="llvm").run({"data": x})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_run_without_a_gpu_points_to_emulation(cnn):
    _, module = cnn
    x = np.zeros((1, 3, 12, 12), np.float32)
    try:
        from vtakit.compiler.backend.nvptx.driver import cuda_driver
        cuda_driver()
    except DeviceError:
        with pytest.raises(DeviceError, match=r"module\.emulate\(inputs\)"):
            module.run({"data": x})
    else:
        (got,) = module.run({"data": x})
        np.testing.assert_allclose(got, module.emulate({"data": x})[0], rtol=1e-5, atol=1e-6)


def test_cuda_graph_target_takes_no_options():
    with pytest.raises(GraphError, match="options are not supported"):
        vg.build(vg.from_onnx(small_cnn()), target="cuda -arch=sm_90")


@pytest.mark.slow
def test_resnet18_builds_for_cuda_and_ptxas_accepts_every_kernel():
    module = vg.build(vg.from_onnx(resnet18()), target="cuda")
    assert _ptxas_every_kernel(module) >= len(module.gpu_kernels) > 10


@pytest.mark.slow
@pytest.mark.parametrize("name", LIGHT)
def test_light_models_build_for_cuda(name):
    model = onnx.load(os.path.join(LIGHT_DIR, f"light_{name}.onnx"))
    module = vg.build(vg.from_onnx(model), target="cuda")
    assert _ptxas_every_kernel(module) >= len(module.gpu_kernels) > 0


def test_cli_compile_for_cuda_writes_a_package_of_checked_ptx(tmp_path, capsys):
    import json

    from vtakit.cli import main
    from vtakit.compiler.graph.package import read_package
    from vtakit.runtime.gpu_code import GPUKernelCode

    model = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), model)
    out = tmp_path / "cnn.vtapkg"
    assert main(["compile", str(model), "--target", "cuda", "-o", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["target"] == "cuda" and summary["ptxas"]["checked"] and summary["ptxas"]["spill_bytes"] == 0
    package = read_package(out)
    assert package.target == "cuda" and all(isinstance(k, GPUKernelCode) for k in package.kernels)
    assert summary["ptxas"]["kernels"] == sum(len(k.kernels) for k in package.kernels)
    for code in package.kernels:   # the saved PTX, not the module's: ptxas accepts each program
        report = ptxas_check(code.ptx, code.arch)
        assert sorted(k.name for k in report.kernels) == sorted(k.name for k in code.kernels)
    loaded = vg.load(out)
    with pytest.raises(ArgumentError, match="keeps their PTX only; build the network again"):
        loaded.run({"data": np.zeros((1, 3, 12, 12), np.float32)})
