"""Process start-up shared by the driver and every worker process.

pyarrow asks, at the first conversion of Python objects in a process (`pa.array`,
`to_pylist`, a compute call with a Python scalar), whether they are pandas objects, and
imports pandas to answer: 0.2-0.25 s in every process (the driver and each worker), a tenth
of a retune's wall time, for a library no stage uses. `skip_pandas_probe` answers that first
question with pandas unimportable, so pyarrow notes "no pandas" for its type probes. The
moment anything imports pandas after that (a reader through `datasets`, a plugin), pyarrow's
pandas integration is switched back on (its `compat`, which imports pandas with raise_ set:
pyarrow's pandas-shim.pxi, `_check_import`), so pandas objects convert as they always did.
tests/test_executor.py checks both orders."""
from __future__ import annotations

import sys


class _PandasUnimportable:
    """A meta path finder that refuses pandas, for the probe only (a None in sys.modules is
    not enough: pyarrow's compiled import takes it for the module)."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == "pandas" or name.startswith("pandas."):
            raise ImportError("pandas left out of pyarrow's first type probe (pipeline/startup.py)")
        return None


class _PandasIntegrationBack:
    """A meta path finder that waits for the first `import pandas`, lets it run, then tells
    pyarrow pandas is here (once; it then leaves sys.meta_path)."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name != "pandas":
            return None
        sys.meta_path.remove(cls)
        import importlib.util
        spec = importlib.util.find_spec("pandas")
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_tell_pyarrow(module):
            exec_module(module)
            import pyarrow.lib
            try:
                pyarrow.lib._pandas_api.compat
            except ImportError:          # a pandas pyarrow does not support: pandas itself still imports
                pass
        spec.loader.exec_module = exec_then_tell_pyarrow
        return spec


def skip_pandas_probe() -> None:
    if "pandas" in sys.modules:          # imported already: nothing to save
        return
    import pyarrow as pa
    sys.meta_path.insert(0, _PandasUnimportable)
    try:
        pa.array([0])
    finally:
        sys.meta_path.remove(_PandasUnimportable)
    if _PandasIntegrationBack not in sys.meta_path:
        sys.meta_path.insert(0, _PandasIntegrationBack)
