"""cdi.log.LazyLogger: debug messages import nothing while logging is unconfigured (and unimported);
warnings still reach stderr through logging's last-resort handler; configured logging sees all."""
import subprocess
import sys
from pathlib import Path

REPO = str(Path(__file__).resolve().parents[3])


def run(code):
    done = subprocess.run([sys.executable, "-I", "-S", "-c", f"import sys; sys.path.insert(0, {REPO!r})\n" + code],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done


def test_debug_without_logging_imports_nothing_warning_reaches_stderr():
    done = run("from cdi.log import get_logger\n"
               "log = get_logger('cdi.test')\n"
               "log.debug('quiet %s', 1); log.info('quiet')\n"
               "print('logging' in sys.modules)\n"
               "log.warning('loud %s', 2)\n")
    assert done.stdout.split() == ["False"]
    assert done.stderr == "loud 2\n"


def test_configured_logging_gets_debug_messages_naming_the_caller():
    done = run("import logging\n"
               "logging.basicConfig(level=logging.DEBUG, format='%(levelname)s %(name)s %(funcName)s %(message)s')\n"
               "from cdi.log import get_logger\n"
               "def caller():\n"
               "    get_logger('cdi.test').debug('seen %s', 3)\n"
               "caller()\n")
    assert done.stderr == "DEBUG cdi.test caller seen 3\n"
