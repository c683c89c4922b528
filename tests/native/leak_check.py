#!/usr/bin/env python3
"""Leak and memory-error check of the native timing wheel; anyone can run it.

    python tests/native/leak_check.py            # every tool available
    python tests/native/leak_check.py --tool valgrind
    python tests/native/leak_check.py --tool asan

Compiles native/timing_wheel.c with the driver tests/native/timer_leak_driver.c
and runs it under valgrind (--leak-check=full, any leak or error fails) and
under AddressSanitizer + UndefinedBehaviorSanitizer with LeakSanitizer. The
driver checks its own results too, so a wrong program cannot pass.

Exit status: 0 clean, 1 a leak / memory error / failed expectation,
2 no tool available (neither valgrind nor a gcc/cc that links -fsanitize=address).
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
NATIVE = os.path.join(ROOT, "native")
SOURCES = [os.path.join(HERE, "timer_leak_driver.c"), os.path.join(NATIVE, "timing_wheel.c")]
WARNINGS = ["-Wall", "-Wextra", "-Werror", "-std=gnu11"]


def _compiler():
    return os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")


def _compile(out_dir, name, flags):
    exe = os.path.join(out_dir, name)
    cmd = [_compiler(), *WARNINGS, *flags, "-I", NATIVE, *SOURCES, "-o", exe]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        return None, " ".join(cmd) + "\n" + result.stderr
    return exe, ""


def _sanitizer_works(out_dir):
    """True if the compiler can build and run a program with -fsanitize=address."""
    if not _compiler():
        return False
    probe = os.path.join(out_dir, "probe.c")
    with open(probe, "w") as f:
        f.write("int main(void) { return 0; }\n")
    exe = os.path.join(out_dir, "probe")
    built = subprocess.run([_compiler(), "-fsanitize=address", probe, "-o", exe],
                           capture_output=True)
    return built.returncode == 0 and subprocess.run([exe], capture_output=True).returncode == 0


def run_valgrind(out_dir):
    exe, err = _compile(out_dir, "driver_valgrind", ["-O1", "-g"])
    if exe is None:
        return False, "compile failed:\n" + err
    result = subprocess.run(
        ["valgrind", "--leak-check=full", "--show-leak-kinds=all", "--errors-for-leak-kinds=all",
         "--error-exitcode=1", exe], capture_output=True, text=True)
    summary = [line for line in result.stderr.splitlines()
               if any(k in line for k in ("HEAP SUMMARY", "in use at exit", "total heap usage",
                                          "All heap blocks", "definitely lost", "indirectly lost",
                                          "ERROR SUMMARY", "expectation"))]
    return result.returncode == 0, "\n".join([result.stdout.strip(), *summary])


def run_asan(out_dir):
    exe, err = _compile(out_dir, "driver_asan",
                        ["-O1", "-g", "-fno-omit-frame-pointer",
                         "-fsanitize=address,undefined", "-fno-sanitize-recover=undefined"])
    if exe is None:
        return False, "compile failed:\n" + err
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:abort_on_error=0",
               UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1")
    result = subprocess.run([exe], capture_output=True, text=True, env=env)
    text = (result.stdout + result.stderr).strip()
    if result.returncode == 0:
        text += "\nAddressSanitizer/LeakSanitizer/UBSan: no leaks, no errors"
    return result.returncode == 0, text


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tool", choices=["all", "valgrind", "asan"], default="all")
    args = parser.parse_args(argv)
    if not _compiler():
        print("leak_check: no C compiler found (set CC)")
        return 2
    with tempfile.TemporaryDirectory(prefix="sl-leak-") as out_dir:
        tools = []
        if args.tool in ("all", "valgrind") and shutil.which("valgrind"):
            tools.append(("valgrind", run_valgrind))
        if args.tool in ("all", "asan") and _sanitizer_works(out_dir):
            tools.append(("asan", run_asan))
        if not tools:
            print(f"leak_check: no tool available for --tool={args.tool}")
            return 2
        failed = False
        for name, run in tools:
            ok, report = run(out_dir)
            print(f"== {name}: {'clean' if ok else 'FAILED'}")
            print(report)
            failed |= not ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
