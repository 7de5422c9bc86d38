"""Edits of a planned sweep, for the `edit_trials` fixture (tests/conftest.py)."""


def hold_all(seconds: float):
    """Keep every trial busy `seconds` in each epoch, so that trials overlap in time."""

    def edit(plan):
        for config in plan.configs:
            config["_hold"] = seconds

    return edit
