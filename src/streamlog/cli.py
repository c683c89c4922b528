"""The `streamlog` command: post-mortem tools over a log directory.

    streamlog dump FILE... [--print-records]     list batches (and records) of segment files
    streamlog dump --verify DIR                  check CRCs, offsets and indexes of a whole root
    streamlog verify DIR                         the same

Exit codes: 0 ok, 1 problems found, 2 bad usage or unreadable input.
"""
import argparse
import os
import sys

from .errors import StreamlogError
from .progress import Progress

EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE = 0, 1, 2


def _print_report(report, out):
    for note in report.notes:
        print(f"note: {note}", file=out)
    for problem in report.problems:
        print(f"PROBLEM: {problem}", file=out)
    status = "OK" if report.ok else f"{len(report.problems)} PROBLEM(S)"
    print(f"{status}: {report.partitions} partition(s), {report.segments} segment(s), "
          f"{report.batches} batch(es), {report.records} record(s), {report.bytes} bytes "
          f"checked in {report.root}", file=out)


def cmd_verify(args, out=sys.stdout):
    from .storage.verify import verify_directory
    root = args.path
    if not os.path.isdir(root):
        print(f"streamlog verify: {root} is not a directory", file=sys.stderr)
        return EXIT_USAGE
    bar = Progress("verify", 1, enabled=not args.quiet)

    def progress(done, total, path):
        bar.total = total
        bar.update(done, os.path.basename(os.path.dirname(path)) if path else "")
    report = verify_directory(root, progress)
    bar.finish()
    _print_report(report, out)
    return EXIT_OK if report.ok else EXIT_PROBLEMS


def cmd_dump(args, out=sys.stdout):
    from .storage.dump import dump_file
    if args.verify:
        if len(args.files) != 1:
            print("streamlog dump --verify takes one directory", file=sys.stderr)
            return EXIT_USAGE
        args.path = args.files[0]
        return cmd_verify(args, out)
    status = EXIT_OK
    for path in args.files:
        try:
            for line in dump_file(path, print_records=args.print_records,
                                  max_value_bytes=args.max_value_bytes):
                print(line, file=out)
        except (ValueError, OSError, StreamlogError) as exc:
            print(f"streamlog dump: {exc}", file=sys.stderr)
            status = EXIT_USAGE
    return status


def build_parser():
    parser = argparse.ArgumentParser(
        prog="streamlog", description="Embedded Kafka-model log: inspect and verify data directories.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("dump", help="print the batches (and records) of segment files",
                       description="Print .log/.index/.timeindex files, like kafka-dump-log; "
                                   "with --verify, check a whole directory instead.")
    p.add_argument("files", nargs="+", help="segment files, or one directory with --verify")
    p.add_argument("--print-records", "--print-data-log", action="store_true",
                   help="also print every record of each batch")
    p.add_argument("--max-value-bytes", type=int, default=60,
                   help="how much of each key and value to show (default 60)")
    p.add_argument("--verify", action="store_true",
                   help="check CRCs, offsets and indexes of the directory given")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_dump)

    p = sub.add_parser("verify", help="check CRCs, offsets and indexes of a whole directory",
                       description="Read every segment read-only and report corrupt batches, "
                                   "offset disorder and index entries that disagree with the log. "
                                   "Safe while a writer is running.")
    p.add_argument("path", help="the database directory")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_verify)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except StreamlogError as exc:
        print(f"streamlog {args.command}: {exc}", file=sys.stderr)
        return EXIT_PROBLEMS
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
