"""How a run happens: the engine (check.py) starts worker processes (runner.py, worker.py) on the
device under test (device.py decides native or emulated), runs the runtime checks
(runtime_checks.py), notes the ATen overloads reached (exercised.py) and shows progress."""
