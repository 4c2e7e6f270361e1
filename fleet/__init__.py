"""A fleet simulator: a region of simulated replicas in virtual time, driven by the platform's
own picker, ladder, shedding, limiter arithmetic and context builder, with a workload of users.

    from fleet import run_scenario, write_report
    result = run_scenario("gpus-run-out", scale=0.05, seed=1)
    write_report(result, Path("report"))
"""

from fleet.scenarios import SCENARIOS, ScenarioResult, run_scenario


def write_report(result: ScenarioResult, folder: object) -> list[object]:
    """Writes the tables and plots (imports matplotlib only when asked to)."""
    from pathlib import Path

    from fleet.report import write

    return list(write(result, Path(str(folder))))


__all__ = ["SCENARIOS", "ScenarioResult", "run_scenario", "write_report"]
