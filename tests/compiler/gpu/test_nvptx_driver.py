"""The CUDA driver path of ``CUDAModule.__call__``, without a GPU: a stand-in for libcuda keeps
device memory in numpy and runs each launched kernel in the emulator, so the calls the module
makes (allocations, copies both ways, launch geometry, parameter order, workspaces, frees) are
checked end to end. On a machine with a GPU the real driver is exercised by the other tests."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import vtakit
from vtakit.compiler.backend.nvptx import CUDAArray, DeviceProgram, cuda_array
from vtakit.compiler.backend.nvptx import driver as driver_module
from vtakit.compiler.gpu_emulator import emulate
from vtakit.errors import ArgumentError, DeviceError
from tests.compiler.gpu.nvptx_cases import shared_gemm, two_kernels


class FakeLibCuda:
    """The libcuda entry points the driver calls, with the C calling conventions ctypes gives them."""

    def __init__(self, program: DeviceProgram, devices: int = 1, fail: str = "") -> None:
        self.program = program
        self.devices = devices
        self.fail = fail
        self.memory: dict[int, np.ndarray] = {}
        self.next_address = 0x10000
        self.launches: list[tuple[str, tuple, tuple]] = []
        self.functions: list[str] = []
        self.ptx = b""

    def cuInit(self, flags):
        return 0

    def cuDeviceGetCount(self, count):
        count._obj.value = self.devices
        return 0

    def cuDeviceGet(self, device, ordinal):
        device._obj.value = ordinal.value
        return 0

    def cuDevicePrimaryCtxRetain(self, context, device):
        context._obj.value = 0xC0
        return 0

    def cuCtxSetCurrent(self, context):
        return 0

    def cuGetErrorString(self, status, message):
        message._obj.value = b"CUDA_ERROR_OUT_OF_MEMORY"
        return 0

    def cuModuleLoadData(self, module, image):
        self.ptx = image.value
        module._obj.value = 0x40
        return 0

    def cuModuleGetFunction(self, function, module, name):
        self.functions.append(name.decode())
        function._obj.value = len(self.functions)
        return 0

    def cuMemAlloc_v2(self, pointer, size):
        if self.fail == "cuMemAlloc_v2":
            return 2
        pointer._obj.value = self.next_address
        self.memory[self.next_address] = np.full(size.value, 0xAB, np.uint8)  # garbage, as on a GPU
        self.next_address += (size.value + 255) // 256 * 256
        return 0

    def cuMemFree_v2(self, pointer):
        del self.memory[pointer.value]
        return 0

    def cuMemcpyHtoD_v2(self, dst, src, size):
        self.memory[dst.value][:size.value] = np.frombuffer(ctypes.string_at(src.value, size.value), np.uint8)
        return 0

    def cuMemcpyDtoH_v2(self, dst, src, size):
        ctypes.memmove(dst.value, self.memory[src.value].ctypes.data, size.value)
        return 0

    def cuLaunchKernel(self, function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        if self.fail == "cuLaunchKernel":
            return 2
        name = self.functions[function.value - 1]
        kernel = next(k for k in self.program.kernels if k.name == name)
        grid, block = (gx.value, gy.value, gz.value), (bx.value, by.value, bz.value)
        self.launches.append((name, grid, block))
        assert (grid, block, shared.value) == (kernel.grid, kernel.block, 0)
        pointers = [ctypes.c_uint64.from_address(params[k]).value for k in range(len(kernel.params))]
        arrays = [self.memory[p].view(b.dtype)[:int(np.prod([e.value for e in b.shape]))].reshape(
            [e.value for e in b.shape]) for p, b in zip(pointers, kernel.params)]
        emulate(DeviceProgram(name, kernel.params, [kernel]), arrays)
        return 0

    def cuCtxSynchronize(self):
        return 0


@pytest.fixture
def fake_gpu(monkeypatch):
    """Install a fake libcuda for ``program`` (returned by the fixture's factory)."""
    def install(mod, **options):
        lib = FakeLibCuda(mod.program, **options)
        monkeypatch.setattr(driver_module, "_driver", None)
        monkeypatch.setattr(driver_module, "_load_library", lambda: lib)
        monkeypatch.setattr(mod, "_loaded", None)
        return lib
    return install


def _int_gemm(fake_gpu, seed):
    """The 16x32 @ 32x16 int32 shared-memory GEMM built for cuda on the fake driver, its library, and
    random operands ``a``, ``b`` with a zeroed output ``c``."""
    s, args = shared_gemm(16, 32, 8, "int32")
    mod = vtakit.build(s, args, target="cuda")
    lib = fake_gpu(mod)
    rng = np.random.default_rng(seed)
    a, b = rng.integers(-9, 9, (16, 32)).astype("int32"), rng.integers(-9, 9, (32, 16)).astype("int32")
    return mod, lib, a, b, np.zeros((16, 16), "int32")


def test_a_call_copies_in_launches_and_copies_the_outputs_back(fake_gpu):
    mod, lib, a, b, c = _int_gemm(fake_gpu, 3)
    mod(a, b, c)
    np.testing.assert_array_equal(c, a @ b)
    assert lib.ptx.startswith(b"//") and b".entry main_kernel0" in lib.ptx
    assert lib.launches == [("main_kernel0", (2, 2, 1), (8, 8, 1))]
    assert lib.memory == {}  # every allocation freed


def test_workspaces_are_allocated_for_multi_kernel_programs(fake_gpu):
    n = 64
    s, args = two_kernels(n)
    mod = vtakit.build(s, args, target="cuda")
    lib = fake_gpu(mod)
    x = np.random.default_rng(0).integers(-4, 4, (n, n)).astype("float32")
    out = np.zeros(n, "float32")
    mod(x, out)
    np.testing.assert_array_equal(out, (2 * x).sum(axis=1))
    assert [name for name, _, _ in lib.launches] == ["main_kernel0", "main_kernel1"]
    assert lib.memory == {}


def test_driver_failures_name_the_call_and_free_what_was_allocated(fake_gpu):
    s, args = shared_gemm(16, 32, 8)
    mod = vtakit.build(s, args, target="cuda")
    arrays = np.ones((16, 32), "float32"), np.ones((32, 16), "float32"), np.zeros((16, 16), "float32")
    lib = fake_gpu(mod, fail="cuMemAlloc_v2")
    with pytest.raises(DeviceError, match="cuMemAlloc_v2 failed with status 2: CUDA_ERROR_OUT_OF_MEMORY"):
        mod(*arrays)
    lib = fake_gpu(mod, fail="cuLaunchKernel")
    with pytest.raises(DeviceError, match="cuLaunchKernel failed with status 2"):
        mod(*arrays)
    assert lib.memory == {}


def test_no_device_is_a_device_error_pointing_to_emulation(fake_gpu):
    s, args = shared_gemm(16, 32, 8)
    mod = vtakit.build(s, args, target="cuda")
    fake_gpu(mod, devices=0)
    with pytest.raises(DeviceError, match=r"finds no GPU; run the kernels on the CPU with mod.emulate\(\*arrays\)"):
        mod(np.ones((16, 32), "float32"), np.ones((32, 16), "float32"), np.zeros((16, 16), "float32"))


def test_the_driver_library_is_found_by_name(monkeypatch):
    tried = []

    def refuse(name):
        tried.append(name)
        raise OSError(name)
    monkeypatch.setattr(driver_module.ctypes, "CDLL", refuse)
    with pytest.raises(DeviceError, match="no CUDA driver library"):
        driver_module._load_library()
    assert tried[:2] == ["libcuda.so.1", "libcuda.so"]


def test_time_evaluator_times_the_kernels_with_resident_operands(fake_gpu):
    s, args = shared_gemm(16, 32, 8, "int32")
    mod = vtakit.build(s, args, target="cuda")
    lib = fake_gpu(mod)
    a, b, c = np.ones((16, 32), "int32"), np.ones((32, 16), "int32"), np.zeros((16, 16), "int32")
    timing = mod.time_evaluator(number=2, repeat=3)(a, b, c)
    assert len(timing.results) == 3 and all(t > 0 for t in timing.results)
    assert len(lib.launches) == 1 + 2 * 3  # a warm-up run, then the timed ones
    np.testing.assert_array_equal(c, np.full((16, 16), 32))
    with pytest.raises(ArgumentError, match="takes 3 arguments"):
        mod.time_evaluator()(a, b)


def test_device_arrays_stay_on_the_gpu(fake_gpu):
    mod, lib, a, b, _ = _int_gemm(fake_gpu, 5)
    da, db, dc = cuda_array(a), cuda_array(b), CUDAArray.empty((16, 16), "int32")
    assert len(lib.memory) == 3
    copies = []
    lib.cuMemcpyHtoD_v2 = lambda *x, f=lib.cuMemcpyHtoD_v2: copies.append(1) or f(*x)
    mod(da, db, dc)
    assert copies == [] and len(lib.memory) == 3  # no copies, nothing allocated or freed by the call
    np.testing.assert_array_equal(dc.numpy(), a @ b)
    c = np.zeros((16, 16), "int32")
    mod(da, b, c)  # numpy and device operands mixed
    np.testing.assert_array_equal(c, a @ b)
    dc.free()
    assert len(lib.memory) == 2
    with pytest.raises(DeviceError, match="was freed"):
        mod(da, db, dc)
    with pytest.raises(ArgumentError, match=r"copyfrom: expected a \(16, 32\) int32 numpy array, got \(16, 32\) int64"):
        da.copyfrom(a.astype("int64"))
    with pytest.raises(ArgumentError, match="must be a numpy array, got CUDAArray"):
        mod.emulate(da, b, c)
    with pytest.raises(ArgumentError, match="has shape .32, 16., expected .16, 32."):
        mod(db, db, c)


def test_device_arrays_need_a_gpu():
    try:
        array = cuda_array(np.ones(4, "float32"))
    except DeviceError as exc:
        assert "mod.emulate" in str(exc)
    else:  # a machine with a GPU
        np.testing.assert_array_equal(array.numpy(), np.ones(4, "float32"))


def test_time_kernels_runs_the_loaded_module_and_copies_the_outputs_back(fake_gpu):
    from vtakit.compiler.backend.nvptx.timer import time_kernels

    mod, lib, a, b, c = _int_gemm(fake_gpu, 4)
    times = time_kernels(mod, [a, b, c], number=2, repeat=3)
    assert len(times) == 3 and all(t >= 0 for t in times)
    np.testing.assert_array_equal(c, a @ b)
    assert len(lib.launches) == 1 + 2 * 3   # a warm-up run, then repeat x number
    assert lib.memory == {}
