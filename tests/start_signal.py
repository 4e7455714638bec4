"""Run `python -m MODULE ARGS` as the interpreter does, with SIGNAL sent to itself the moment
IMPORT starts being imported: a signal in the first milliseconds, at a point a test can name."""
import importlib.abc, os, runpy, signal, sys

module, target, signame, *args = sys.argv[1:]


class Hook(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target_=None):
        if name == target:
            os.kill(os.getpid(), getattr(signal, signame))
        return None


sys.meta_path.insert(0, Hook())
sys.argv = ["-m", *args]            # as the -m option leaves it while it locates MODULE
runpy._run_module_as_main(module)
