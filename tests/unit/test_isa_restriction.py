"""Held to AVX2: an AVX-512 machine computes as the AVX2 kind when torch's three CPU libraries are held to AVX2
(``store.results.isa_restriction``), so a slice begun on an AVX2 machine can be finished on it. What is tested: the
variables read all or none (a partial or unknown setting is refused by name, by the runner before any work), the
kind such a process records (its flags above AVX2 left out, in a fresh interpreter: torch reads the variables once),
and the refusals that name the way (plan-slices, the mixed-kinds refusal of a model's slice, a cached translation
model of the AVX2 kind)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from headprune_utils.store import results
from headprune_utils.store.results import ISA_VARIABLES, IsaRestrictionError, held_hint, held_to, isa_restriction

HELD = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
AVX2 = "cpu: AMD EPYC [sse4_2 avx avx2 fma]"
AVX512 = "cpu: AMD EPYC [sse4_2 avx avx2 fma avx512f avx512_bf16]"


@pytest.fixture
def clean_env(monkeypatch):
    for v in ISA_VARIABLES:
        monkeypatch.delenv(v, raising=False)
    return monkeypatch


def test_none_set_is_no_restriction_and_all_three_at_avx2_is_avx2(clean_env):
    assert isa_restriction() is None
    for k in HELD:
        clean_env.setenv(k, "  ")  # blank: unset
    assert isa_restriction() is None
    for k, v in HELD.items():
        clean_env.setenv(k, v)
    assert isa_restriction() == "avx2"
    assert results.cpu_description()["isa_restriction"] == "avx2"


@pytest.mark.parametrize("given", [
    {"ATEN_CPU_CAPABILITY": "avx2"},                                     # one of three
    {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},  # two of three
    {**HELD, "ONEDNN_MAX_CPU_ISA": "AVX512_CORE"},                      # two levels
    {k: "AVX512" for k in HELD},                                         # a level headprune does not know
    {**HELD, "MKL_ENABLE_INSTRUCTIONS": "  "},                           # blank is unset: two of three
    {**HELD, "ATEN_CPU_CAPABILITY": "AVX2"},                             # torch ignores upper case (warns, stays)
    {**HELD, "ATEN_CPU_CAPABILITY": " avx2"},                            # nor does it strip
    {**HELD, "MKL_ENABLE_INSTRUCTIONS": "avx2"},                         # MKL and oneDNN as documented
])
def test_a_partial_or_unknown_restriction_is_refused_naming_every_variable(clean_env, given):
    for k, v in given.items():
        clean_env.setenv(k, v)
    with pytest.raises(IsaRestrictionError) as e:
        isa_restriction()
    msg = str(e.value)
    assert all(v in msg for v in ISA_VARIABLES), msg
    assert "ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2" in msg, "the way to hold"
    assert results.cpu_description()["isa_restriction"].startswith("refused: "), "a device record never fails"
    from headprune_utils.run.execution import run_study
    with pytest.raises(IsaRestrictionError):  # a notebook's run (no runner before it) stops before any work
        run_study("random_pruning", None, "t")


def test_held_to_leaves_out_the_flags_above_avx2_and_nothing_else():
    assert held_to(AVX512, "avx2") == AVX2
    assert held_to(AVX2, "avx2") == AVX2
    assert held_to("cpu: X [sse4_2 avx avx2 fma amx_bf16 amx_tile avx512f]", "avx2") == "cpu: X [sse4_2 avx avx2 fma]"
    assert held_to("cpu: X [avx512f]", "avx2") == "cpu: X"
    assert held_to("cpu: X", "avx2") == "cpu: X"
    assert held_to("cuda: NVIDIA H200", "avx2") == "cuda: NVIDIA H200"
    assert held_to("cpu: Arm [asimd sve]", "avx2") == "cpu: Arm [asimd sve]"


def test_the_hint_is_given_only_where_holding_this_machine_makes_it_the_kind_that_began():
    hint = held_hint(AVX2, AVX512)
    assert hint.startswith(" Or resume it here held to AVX2: start the command with ATEN_CPU_CAPABILITY=avx2 "
                           "MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2"), hint
    assert held_hint(AVX2, AVX2) == ""                                            # the same kind: nothing refused
    assert held_hint("cpu: Another CPU [sse4_2 avx avx2 fma]", AVX512) == ""      # another model of CPU
    assert held_hint("cpu: AMD EPYC [sse4_2 avx]", AVX512) == ""                  # below AVX2: not offered


def test_a_held_process_on_a_slice_begun_unheld_is_told_to_unset_the_hold(clean_env):
    """Held to AVX2 on the AVX-512 machine that began the slice unheld: the refusal says to unset the variables
    (not to resume on a machine of the kind that began it: this is one)."""
    assert held_hint(AVX512, AVX2) == "", "not held: an AVX2 machine cannot rise"
    for k, v in HELD.items():
        clean_env.setenv(k, v)
    hint = held_hint(AVX512, AVX2)
    assert "This process is held to AVX2" in hint and f"unset the three variables to compute as {AVX512}" in hint


def _kind_in_fresh_python(env: dict) -> subprocess.CompletedProcess:
    code = ("from headprune_utils.store import results as r; import torch; "
            "print(r.machine_kind('cpu')); print(torch.backends.cpu.get_cpu_capability()); "
            "print(r.cpu_description()['isa_restriction'])")
    base = {k: v for k, v in os.environ.items() if k not in ISA_VARIABLES}
    return subprocess.run([sys.executable, "-c", code], env={**base, **env}, capture_output=True, text=True,
                          timeout=120)


def test_a_held_process_records_the_avx2_kind_and_computes_with_avx2_kernels():
    """In a fresh interpreter (torch reads ATEN_CPU_CAPABILITY once): held, its kind is this machine's with the
    flags above AVX2 left out, torch's own kernels are AVX2 ones, and the run's device record says it was held.
    (On a machine without AVX-512 the two kinds are the same.)"""
    free = _kind_in_fresh_python({})
    held = _kind_in_fresh_python(HELD)
    assert free.returncode == 0 and held.returncode == 0, free.stderr + held.stderr
    free_kind, _, free_level = free.stdout.split("\n")[:3]
    held_kind, held_cap, held_level = held.stdout.split("\n")[:3]
    assert free_level == "None" and held_level == "avx2"
    assert held_kind == held_to(free_kind, "avx2")
    if "avx2" in free_kind:
        assert held_cap == "AVX2", held.stdout


def test_torch_at_other_kernels_than_the_variables_say_is_refused(clean_env, monkeypatch):
    """Variables set after torch chose its kernels (here: torch says AVX512 while the variables say AVX2) would
    record the AVX2 kind for AVX-512 numbers: refused, naming the variables."""
    import torch

    for k, v in HELD.items():
        clean_env.setenv(k, v)
    monkeypatch.setattr(results, "cpu_description", lambda: {
        "cpu_model": "AMD EPYC", "cpu_count": 2, "cpu_capability": ["sse4_2", "avx", "avx2", "fma", "avx512f"],
        "isa_restriction": "avx2"})
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    results._kind_of.cache_clear()
    try:
        with pytest.raises(IsaRestrictionError, match=r"ATEN_CPU_CAPABILITY='avx2' is set, but torch computes with "
                                                      r"AVX512 kernels"):
            results.machine_kind("cpu")
        monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
        results._kind_of.cache_clear()
        assert results.machine_kind("cpu") == "cpu: AMD EPYC [sse4_2 avx avx2 fma]"
    finally:
        results._kind_of.cache_clear()


def test_the_runner_refuses_a_partial_restriction_before_any_work(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ISA_VARIABLES}
    env.update(ATEN_CPU_CAPABILITY="avx2", HEADPRUNE_OUTPUT_DIR=str(tmp_path / "out"))
    r = subprocess.run([sys.executable, "-m", "headprune_utils.run", "--profile", "smoke", "--check"], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "error: the CPU instruction-set variables are set in part" in r.stderr
    assert "MKL_ENABLE_INSTRUCTIONS unset" in r.stderr and "ONEDNN_MAX_CPU_ISA unset" in r.stderr
    assert not (tmp_path / "out").exists(), "nothing written"
