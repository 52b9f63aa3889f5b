"""The table of the differential fidelity suite (tests/fidelity/test_fidelity.py, issue 29 item 5).

Runs the suite and prints one table: every env, how it is served and made short, and each
check's status (pass, FAIL with the first difference, xfail with its reason, or ``-`` where a
check does not apply: an env that does not render has no frames). ``--write`` also puts the
table into ``benchmarks/fidelity.md``, between its ``fidelity-table`` markers.

    python benchmarks/fidelity_table.py [--write] [PYTEST ARGS, e.g. -k mujoco]
"""
from __future__ import annotations

import argparse
import datetime
import os
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)        # the checkout's dmrpc_gym, as ``python -m pytest`` from the root imports it
sys.path.insert(1, HERE)
import sections  # noqa: E402  (benchmarks/ is a folder of scripts)
from sections import commit  # noqa: E402,F401  (bench_render_cost and bench_served_local take it from here)
MD = os.path.join(HERE, "fidelity.md")
COLUMNS = ("spaces", "steps", "frames", "second_world")


class Collect:
    """A pytest plugin keeping each (env, check) outcome of the suite."""

    def __init__(self):
        self.cases: dict[str, object] = {}
        self.status: dict[tuple[str, str], tuple[str, str]] = {}

    def pytest_collection_modifyitems(self, items):
        for item in items:
            params = getattr(getattr(item, "callspec", None), "params", {})
            if "case" in params:
                self.cases.setdefault(params["case"].id, params["case"])

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        params = getattr(getattr(item, "callspec", None), "params", {})
        if "case" not in params:
            return
        key = (params["case"].id, params.get("check", "?"))
        if report.when == "call" or (report.outcome != "passed" and key not in self.status):
            self.status[key] = _status(report)


def _status(report) -> tuple[str, str]:
    if hasattr(report, "wasxfail"):     # a strict XPASS fails without it (its message says XPASS(strict))
        return ("xfail", report.wasxfail) if report.skipped else ("XPASS", f"passes, marked xfail: {report.wasxfail}")
    if report.passed:
        return "pass", ""
    if report.skipped:
        return "skipped", str(report.longrepr[-1]) if isinstance(report.longrepr, tuple) else ""
    text = report.longreprtext.strip().splitlines()
    lines = [line.strip() for line in text if line.strip()]
    if any("Traceback" in line for line in lines):      # a server that did not start: its error
        errors = [line.removeprefix("E").strip() for line in lines if line.startswith("E ")]
        return "FAIL", (errors or lines)[-1]
    wanted = [line for line in lines if line.startswith(("op ", "observation", "action", "possible", "reward_spec",
                                                         "discount_spec", "E ", "the case"))]
    return "FAIL", (wanted or lines[-1:] or ["(no message)"])[0].removeprefix("E ").strip()


def table(collect: Collect, seconds: float, outcome: str) -> str:
    rows, notes = [], []
    columns = [c for c in COLUMNS if any(k[1] == c for k in collect.status)]
    counts: dict[str, int] = {}
    ran = [case_id for case_id in collect.cases if any(k[0] == case_id for k in collect.status)]
    for case_id in ran:
        case = collect.cases[case_id]
        cells = []
        for check in columns:
            state, why = collect.status.get((case_id, check), ("-", ""))
            counts[state] = counts.get(state, 0) + (state != "-")
            if why:
                if why not in notes:
                    notes.append(why)
                state = f"{state} [{notes.index(why) + 1}]"
            cells.append(state)
        settings = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                             for k, v in case.settings.items())
        rows.append(f"| {case.family} | `{case.name}` | {case.note or settings or '-'} | " + " | ".join(cells) + " |")
    head = ("| family | env | made short by | " + " | ".join(c.replace("_", " ") for c in columns) + " |\n"
            "|---|---|---|" + "---|" * len(columns))
    summary = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()) if n)
    lines = [f"Commit {commit()}, {datetime.date.today().isoformat()}: {len(ran)} envs, {summary}; "
             f"the suite took {seconds:.0f} s ({outcome}).", "", head, *rows, ""]
    lines += [f"[{i}] {why}" + "  " for i, why in enumerate(notes, 1)]
    return "\n".join(lines).rstrip() + "\n"


def write_section(name: str, text: str) -> None:
    """Put ``text`` into benchmarks/fidelity.md between the ``<!-- name -->`` markers (:func:`sections.write_section`)."""
    sections.write_section(MD, name, text, "Fidelity")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="put the table into benchmarks/fidelity.md")
    args, pytest_args = parser.parse_known_args(argv)
    collect = Collect()
    os.chdir(ROOT)
    start = time.perf_counter()
    code = pytest.main(["tests/fidelity/test_fidelity.py", "-q", "-p", "no:cacheprovider", "--tb=line",
                        "-W", "ignore::DeprecationWarning", *pytest_args], plugins=[collect])
    seconds = time.perf_counter() - start
    text = table(collect, seconds, f"pytest exit code {int(code)}")
    print("\n" + text)
    if args.write:
        write_section("fidelity-table", text)
        print(f"wrote {os.path.relpath(MD, ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
