"""vtakit.hw.vivado.write_project: the Vivado project for a PYNQ-Z1/Z2 style board. Vivado is not
installed here: the Tcl is run by a plain Tcl interpreter with every Vivado command recorded, and the
recorded block design is checked against the generated Verilog's ports and the register map."""

import dataclasses
import re
import subprocess

import pytest

from vtakit.errors import ConfigError
from vtakit.hw import vivado
from vtakit.hw.config import VTAConfig
from vtakit.hw.shell import REGISTERS, _ADDR_BITS
from vtakit.hw.verilog import LINT_WAIVERS, TOP_NAME, find_verilator

SMALL = VTAConfig.small()


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    out = tmp_path_factory.mktemp("vivado")
    paths = vivado.write_project(SMALL, out)
    return out, paths


def _ports(text, module):
    """{name: (direction, width)} of ``module``: an independent reading of the port declarations."""
    body = re.search(rf"^module {module}\b(.*?)^endmodule", text, re.S | re.M).group(1)
    ports = {}
    for m in re.finditer(r"(input|output)\s+(?:wire\s+)?(?:\[(\d+):0\]\s*)?(\w+)", body):
        ports[m.group(3)] = (m.group(1), int(m.group(2) or 0) + 1)
    return ports


def _run_tcl(path, argv=("-no-bitstream",), prelude=""):
    """Source the script in Tcl with every Vivado command stubbed; return the recorded calls."""
    tkinter = pytest.importorskip("tkinter")
    tcl = tkinter.Tcl()
    tcl.eval("set ::calls {}")
    tcl.eval('proc unknown {args} { lappend ::calls $args; return "[lindex $args 0]:[lindex $args end]" }')
    if prelude:
        tcl.eval(prelude)
    tcl.eval(f"set ::argv {{{' '.join(argv)}}}")
    tcl.eval(f"source {{{path}}}")
    calls = []
    for i in range(int(tcl.eval("llength $::calls"))):
        calls.append(tcl.splitlist(tcl.eval(f"lindex $::calls {i}")))
    return calls


def tcl_list(text):
    return pytest.importorskip("tkinter").Tcl().splitlist(text)


def _pins(call):
    return [a.split(":", 1)[1] for a in call[1:] if a.startswith(("get_bd_pins:", "get_bd_intf_pins:"))]


def test_write_project_writes_the_verilog_the_wrapper_the_tcl_and_the_constraints(project):
    out, paths = project
    assert [p.name for p in paths] == ["vtakit_top.v", "vtakit_bd_top.v", "create_project.tcl", "vtakit.xdc"]
    assert all(p.parent == out and p.stat().st_size > 0 for p in paths)
    core = (out / "vtakit_top.v").read_text()
    assert f"module {TOP_NAME}" in core
    assert not re.search(r"\bassert\b|\$display|\$write", core)     # assertion-free for synthesis


def test_the_wrapper_connects_every_axi_port_of_the_top_by_its_verilog_name(project):
    out, _ = project
    top = _ports((out / "vtakit_top.v").read_text(), TOP_NAME)
    wrapper_text = (out / "vtakit_bd_top.v").read_text()
    wrapper = _ports(wrapper_text, vivado.WRAPPER_NAME)
    instance = dict(re.findall(r"\.(\w+)\((\w*)\)", wrapper_text))
    axi = [p for p in top if p.startswith(("m_axi__", "s_axil__"))]
    assert len(axi) > 30
    for port in axi + ["clk", "rst", "irq"]:
        outer = instance[port]
        assert outer, port
        assert wrapper[outer] == top[port], port            # same direction and width
        if port.startswith("m_axi__"):
            assert outer == "m_axi_" + port[len("m_axi__"):]
            assert f"aximm:1.0 m_axi {port[len('m_axi__'):].upper()}" in wrapper_text
        elif port.startswith("s_axil__"):
            assert outer == "s_axi_" + port[len("s_axil__"):]
            assert f"aximm:1.0 s_axi {port[len('s_axil__'):].upper()}" in wrapper_text
    assert set(instance) == set(top)                        # retire ports named too (left open)
    assert all(not instance[p] for p in top if p.startswith("retire_"))
    # AXI4 master fields the core lacks are driven by the wrapper
    assert {"m_axi_arcache", "m_axi_awcache", "m_axi_arprot", "m_axi_awprot"} <= set(wrapper)
    assert f"DATA_WIDTH {SMALL.bus_width}" in wrapper_text and "ID_WIDTH 2" in wrapper_text
    assert f"FREQ_HZ {int(SMALL.clock_mhz * 1e6)}" in wrapper_text


def test_the_block_design_wires_the_ps_and_the_core(project):
    out, _ = project
    calls = _run_tcl(out / "create_project.tcl")
    names = [c[0] for c in calls]
    create = next(c for c in calls if c[0] == "create_project")
    assert create[-1] == "-force" and "xc7z020clg400-1" in create
    cells = {c[c.index("-vlnv") + 1] if "-vlnv" in c else c[c.index("-reference") + 1]: c[-1]
             for c in calls if c[0] == "create_bd_cell"}
    assert cells[vivado.WRAPPER_NAME] == "vta_0"
    vlnv = " ".join(cells)
    for ip in ("processing_system7", "proc_sys_reset", "axi_interconnect", "axi_protocol_converter"):
        assert f"xilinx.com:ip:{ip}:" in vlnv
    assert "axi_dwidth_converter" not in vlnv       # BUS_WIDTH 64 = the HP port's width
    ps_props = next(c for c in calls if c[0] == "set_property" and "PCW_USE_S_AXI_HP0" in c[2])
    props = dict(zip(*[iter(tcl_list(ps_props[2]))] * 2))
    assert props["CONFIG.PCW_FPGA0_PERIPHERAL_FREQMHZ"] == f"{SMALL.clock_mhz:g}"
    assert props["CONFIG.PCW_USE_M_AXI_GP0"] == props["CONFIG.PCW_USE_S_AXI_HP0"] == "1"
    assert props["CONFIG.PCW_S_AXI_HP0_DATA_WIDTH"] == "64"

    nets = [_pins(c) for c in calls if c[0] == "connect_bd_net"]
    intf = [_pins(c) for c in calls if c[0] == "connect_bd_intf_net"]
    clock = next(n for n in nets if n[0] == "processing_system7_0/FCLK_CLK0")
    assert {"vta_0/clk", "processing_system7_0/S_AXI_HP0_ACLK", "processing_system7_0/M_AXI_GP0_ACLK",
            "hp0_protocol_converter/aclk"} <= set(clock)
    assert ["rst_ps7_0/peripheral_reset", "vta_0/rst"] in nets
    assert ["vta_0/irq", "processing_system7_0/IRQ_F2P"] in nets
    assert ["processing_system7_0/M_AXI_GP0", "ps7_0_axi_periph/S00_AXI"] in intf
    assert ["ps7_0_axi_periph/M00_AXI", "vta_0/s_axi"] in intf
    assert ["vta_0/m_axi", "hp0_protocol_converter/S_AXI"] in intf
    assert ["hp0_protocol_converter/M_AXI", "processing_system7_0/S_AXI_HP0"] in intf
    # every pin of vta_0 the design names is a port or an interface of the wrapper
    wrapper = _ports((out / "vtakit_bd_top.v").read_text(), vivado.WRAPPER_NAME)
    for pin in (p for n in nets + intf for p in n if p.startswith("vta_0/")):
        name = pin.split("/", 1)[1]
        assert name in wrapper or any(w.startswith(name + "_") for w in wrapper), pin
    assert "validate_bd_design" in names and "launch_runs" not in names     # -no-bitstream stops there


def test_the_gp0_segment_covers_the_register_map(project):
    out, _ = project
    calls = _run_tcl(out / "create_project.tcl")
    seg = next(c for c in calls if c[0] == "assign_bd_address" and any("vta_0/s_axi" in a for a in c))
    offset, size = int(seg[seg.index("-offset") + 1], 0), int(seg[seg.index("-range") + 1], 0)
    assert size >= 1 << _ADDR_BITS and size >= max(r.offset for r in REGISTERS) + 4
    assert offset % size == 0 and offset == vivado.GP0_BASE
    assert "processing_system7_0/Data" in " ".join(seg)
    hp = next(c for c in calls if c[0] == "assign_bd_address" and any("vta_0/m_axi" in a for a in c))
    assert "HP0_DDR_LOWOCM" in " ".join(hp)


def test_the_full_script_builds_and_exports_the_bitstream_and_its_hwh(project):
    out, _ = project
    stubs = ("proc get_property {args} { return 100% }\n"
             "proc glob {args} { lappend ::calls [list glob {*}$args]; return [list /built/file] }\n"
             "rename file _file\n"
             "proc file {sub args} { if {$sub eq \"copy\"} { lappend ::calls [list copy {*}$args]; return }; "
             "return [_file $sub {*}$args] }")
    calls = _run_tcl(out / "create_project.tcl", argv=(), prelude=stubs)
    names = [c[0] for c in calls]
    assert names.index("validate_bd_design") < names.index("launch_runs") < names.index("wait_on_run")
    launch = calls[names.index("launch_runs")]
    assert list(launch[:4]) == ["launch_runs", "impl_1", "-to_step", "write_bitstream"]
    copies = [c[-1] for c in calls if c[0] == "copy"]
    assert copies == [str(out / "vtakit.bit"), str(out / "vtakit.hwh")]


def test_another_bus_width_adds_a_width_converter(tmp_path, monkeypatch):
    wide = dataclasses.replace(SMALL, bus_width=128)
    monkeypatch.setattr("vtakit.hw.verilog.generate_verilog", lambda config, assertions=True: _fake_top(config))
    vivado.write_project(wide, tmp_path)
    calls = _run_tcl(tmp_path / "create_project.tcl")
    intf = [_pins(c) for c in calls if c[0] == "connect_bd_intf_net"]
    assert ["vta_0/m_axi", "hp0_dwidth_converter/S_AXI"] in intf
    assert ["hp0_dwidth_converter/M_AXI", "hp0_protocol_converter/S_AXI"] in intf
    conf = next(c for c in calls if c[0] == "set_property" and "CONFIG.SI_DATA_WIDTH" in c[2])
    props = dict(zip(*[iter(tcl_list(conf[2]))] * 2))
    assert props["CONFIG.SI_DATA_WIDTH"] == "128" and props["CONFIG.MI_DATA_WIDTH"] == "64"
    assert "BUS_WIDTH=128 differs" in (tmp_path / "create_project.tcl").read_text()


def _fake_top(config):
    """A stand-in for the generated Verilog (ports only), to keep the test fast."""
    w = config.bus_width
    ports = [("input", 1, "clk"), ("input", 1, "rst"), ("output", 1, "irq"), ("output", 32, "m_axi__araddr"),
             ("input", w, "m_axi__rdata"), ("output", w, "m_axi__wdata"), ("input", 8, "s_axil__awaddr")]
    decl = "\n".join(f"  {d} {'[%d:0] ' % (n - 1) if n > 1 else ''}{name};" for d, n, name in ports)
    return f"module vtakit_top({', '.join(p[2] for p in ports)});\n{decl}\nendmodule\n"


def test_an_unknown_part_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(ConfigError, match="unknown part 'xc7a35t'.*xc7z020"):
        vivado.write_project(SMALL, tmp_path / "out", part="xc7a35t")
    assert not (tmp_path / "out").exists()
    with pytest.raises(ConfigError):
        vivado.write_project("not a config", tmp_path / "out")


VERILATOR = find_verilator()


@pytest.mark.skipif(VERILATOR is None, reason="Verilator is not installed")
def test_the_wrapper_and_the_core_lint_clean(project):
    out, _ = project
    binary, env = VERILATOR
    result = subprocess.run([binary, "--lint-only", "-Wall", "--top-module", vivado.WRAPPER_NAME, str(LINT_WAIVERS),
                             str(out / "vtakit_top.v"), str(out / "vtakit_bd_top.v")],
                            env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_vtakit_synth_vivado_writes_the_project_before_synthesising(tmp_path, monkeypatch, capsys):
    import vtakit.hw.synth as synth
    from vtakit import cli

    def stop(*args, **kwargs):
        raise KeyboardInterrupt   # the project must already be there when synthesis starts

    monkeypatch.setattr(synth, "synthesize", stop)
    assert cli.main(["synth", "--part", "xc7z020", "--vivado", str(tmp_path / "proj")]) == 130
    names = {p.name for p in (tmp_path / "proj").iterdir()}
    assert {"create_project.tcl", "vtakit_top.v"} <= names
    assert cli.main(["synth", "--part", "ecp5-85k", "--vivado", str(tmp_path / "other")]) == 1
    assert "Zynq part" in capsys.readouterr().err and not (tmp_path / "other").exists()
