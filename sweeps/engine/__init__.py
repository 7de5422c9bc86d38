"""The sweep driver, shared by every script in `sweeps/`: the command line (`cli`), planning and
running a sweep on Ray Tune (`runner`), GPU packing and cost (`packing`), MLflow tracking with its
outage spool (`tracking`), the progress line (`progress`), the sweep's storage (`storage`) and
upstream stages (`stages_plan`). Nothing here names a method's axes: methods declare them
(trainables/core/method.py) and the engine reads the declaration."""
