"""``vtakit.dse``: hardware/software co-design, the accelerator configuration searched together with
its schedules under an FPGA part's budget (docs/dse.md).

:func:`search` proposes :class:`~vtakit.hw.config.VTAConfig` points of a :class:`DesignSpace`
(every key that changes performance or area, bounded by what the ISA encodes and the part holds),
rejects in milliseconds what :func:`vtakit.hw.estimate` says does not fit, clocks the rest at the
part's fmax (:mod:`.fmax`), measures every task of the network with default tilings on the cycle
model (jobs on the tuner's executor: local processes or dask), lets an XGBoost model over
configurations choose what to evaluate next, tunes the schedules of the fastest few, and returns a
:class:`DSEResult`: the Pareto front over latency and the largest resource share, the best
configuration, a table and a plot. The search log resumes a killed search. :mod:`vtakit.dse.verify`
checks the winner: synthesis, its programs on the RTL against the cycle model, the network against
the integer CPU reference.
"""

from vtakit.dse.evaluate import Evaluation, NetworkCycles, TaskCycles, evaluate_job
from vtakit.dse.fmax import DRAM_LATENCY_NS, ECP5_CALIBRATION, FIXED_CLOCK_MHZ, dram_latency_cycles, fmax_mhz
from vtakit.dse.network import BUILTIN_NETWORKS, Network, load_network
from vtakit.dse.result import DSEResult, pareto_front
from vtakit.dse.search import STRATEGIES, Searcher, search
from vtakit.dse.space import KNOBS, OPTIONAL_KNOBS, DesignSpace, Fit, Knob, config_key

__all__ = ["search", "Searcher", "STRATEGIES", "DSEResult", "pareto_front", "Evaluation", "TaskCycles", "NetworkCycles",
           "evaluate_job",
           "DesignSpace", "Fit", "Knob", "KNOBS", "OPTIONAL_KNOBS", "config_key", "fmax_mhz", "dram_latency_cycles",
           "FIXED_CLOCK_MHZ", "DRAM_LATENCY_NS", "ECP5_CALIBRATION", "BUILTIN_NETWORKS", "Network", "load_network"]
