"""The `streamlog` command: topics, produce, consume, and post-mortem tools.

    streamlog topics list|create|delete|describe ... --path DIR
    streamlog produce TOPIC --path DIR [--key-separator SEP] [--format text|json]
    streamlog consume TOPIC --path DIR [--from-beginning | --partition P --offset N|earliest|latest
                                        | --from-timestamp T]
    streamlog groups list|describe|delete|reset-offsets [GROUP] --path DIR ...
    streamlog get-offsets --path DIR [--topic REGEX] [--partitions P,...] [--time T]
                                        TOPIC:PARTITION:OFFSET lines, as kafka-get-offsets
    streamlog delete-records --path DIR --offset-json-file FILE
                                        move log starts up, as kafka-delete-records
    streamlog dump FILE... [--path DIR] [--print-records]
                                        list batches (and records) of segment files; with
                                        --path, each FILE is relative to DIR
    streamlog dump --verify --path DIR  check CRCs, offsets and indexes of a whole root
    streamlog verify --path DIR         the same
    streamlog compact [TOPIC] --path DIR
                                        run a log cleaning pass now on a compacted topic
                                        (every compacted log without TOPIC)
    streamlog serve --path DIR [--host 127.0.0.1] [--port 9092] [--brokers N]
                                        serve the database to Kafka clients until Ctrl-C or
                                        SIGTERM (docs/SERVER.md); --brokers N: a replicated
                                        cluster of N brokers in DIR (docs/CLUSTER.md)
    streamlog repair --path DIR [--dry-run]
                                        rebuild the metadata log from the partition directories

`verify DIR`, `repair DIR` and `dump --verify DIR` take the directory as an argument too.

`consume` (without --group), `topics list|describe`, `groups list|describe`,
`get-offsets`, `verify` and `dump` open the database read-only, so they work while another
process writes. Exit codes: 0 ok, 1 an operation failed (the message says why),
2 bad usage or unreadable input. `repair` exits 1 when a directory could not be
recovered (each is listed with the reason), `compact` when a log was not cleaned
(each says why; a later run cleans it). Only `topics create` and `serve` make a new
database where --path names none; the others refuse the path (exit 2), as every
command refuses a path that holds something other than a database (a file, a directory
of other files, a database whose metadata log is lost: `repair` is named).
"""
import argparse
import base64
import datetime
import json
import os
import re
import sys

from . import __version__
from .errors import (DatabaseLockedError, NotADatabaseError, ReadOnlyError, StreamlogError,
                     UnknownTopicOrPartitionError)
from .progress import Progress
from .storage import compression

EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED = 130   # a shell's 128 + SIGINT


def _print_report(report, out):
    for note in report.notes:
        print(f"note: {note}", file=out)
    for problem in report.problems:
        print(f"PROBLEM: {problem}", file=out)
    status = "OK" if report.ok else f"{len(report.problems)} PROBLEM(S)"
    print(f"{status}: {report.partitions} partition(s), {report.segments} segment(s), "
          f"{report.batches} batch(es), {report.records} record(s), {report.bytes} bytes "
          f"checked in {report.root}", file=out)


def _directory(args, given, command):
    """The directory named by an argument and/or --path; None (after saying why) if unclear."""
    if given is not None and args.path is not None and \
            os.path.realpath(given) != os.path.realpath(args.path):
        print(f"streamlog {command}: the directory is given twice, as {given} and as "
              f"--path {args.path}; give it once", file=sys.stderr)
        return None
    root = given if given is not None else args.path
    if root is None:
        print(f"streamlog {command}: name the database directory: --path DIR (or DIR)",
              file=sys.stderr)
    return root


def _missing(path, command):
    """True (after saying so) when path is not a directory: a command that reads or changes
    an existing database must not make a new one where a path was mistyped."""
    if os.path.isdir(path):
        return False
    print(f"streamlog {command}: {path} is not a directory", file=sys.stderr)
    return True


def cmd_verify(args, out=sys.stdout):
    from .broker.metadata import METADATA_TOPIC
    from .storage import files
    from .storage.verify import verify_directory
    root = _directory(args, args.directory, "verify")
    if root is None:
        return EXIT_USAGE
    if _missing(root, "verify"):
        return EXIT_USAGE
    bar = Progress("verify", 1, enabled=not args.quiet)

    def progress(done, total, path):
        bar.total = total
        bar.update(done, os.path.basename(os.path.dirname(path)) if path else "")
    report = verify_directory(root, progress)
    bar.finish()
    # What a database (or a Kafka log directory: meta.properties) has even with no topic.
    marks = (files.LOCK_FILE, f"{METADATA_TOPIC}-0", files.RECOVERY_POINT_CHECKPOINT,
             "meta.properties")
    if not report.partitions and not report.problems and \
            not any(os.path.exists(os.path.join(root, name)) for name in marks):
        # An "OK" here would vouch for a mistyped path: nothing under it was checked.
        print(f"streamlog verify: {root} holds no partition and no file of a database or of a "
              f"Kafka log directory ({', '.join(marks)}): nothing to verify",
              file=sys.stderr)
        return EXIT_USAGE
    _print_report(report, out)
    return EXIT_OK if report.ok else EXIT_PROBLEMS


def cmd_repair(args, out=sys.stdout):
    from .client.database import repair
    root = _directory(args, args.directory, "repair")
    if root is None:
        return EXIT_USAGE
    report = repair(root, dry_run=args.dry_run)
    for line in report.lines():
        print(line, file=out)
    return EXIT_PROBLEMS if report.not_recovered else EXIT_OK


def cmd_dump(args, out=sys.stdout):
    from .storage.dump import dump_file
    if args.verify:
        if len(args.files) > 1:
            print("streamlog dump --verify takes one directory", file=sys.stderr)
            return EXIT_USAGE
        root = _directory(args, args.files[0] if args.files else None, "dump --verify")
        if root is None:
            return EXIT_USAGE
        args.directory, args.path = None, root
        return cmd_verify(args, out)
    if not args.files:
        print("streamlog dump: name the segment files to dump (relative to --path DIR if "
              "given), or add --verify to check the whole directory", file=sys.stderr)
        return EXIT_USAGE
    status = EXIT_OK
    for path in args.files:
        if args.path is not None:
            path = os.path.join(args.path, path)  # an absolute FILE stays as it is
        if not os.path.isfile(path):
            print(f"streamlog dump: {path}: no such file", file=sys.stderr)
            status = EXIT_USAGE
            continue
        try:
            for line in dump_file(path, print_records=args.print_records,
                                  max_value_bytes=args.max_value_bytes):
                print(line, file=out)
        except StreamlogError as exc:  # read, and found not to be a (whole) segment
            print(f"streamlog dump: {exc}", file=sys.stderr)
            status = max(status, EXIT_PROBLEMS)
        except BrokenPipeError:  # `streamlog dump ... | head`: stdout, not FILE; main ends
            raise
        except (ValueError, OSError) as exc:
            print(f"streamlog dump: {exc}", file=sys.stderr)
            status = EXIT_USAGE
    return status


def _serve_cluster(args, stop, out):
    from .cluster import Cluster
    print(f"starting {args.brokers} brokers in {os.path.abspath(args.path)}", file=out,
          flush=True)
    with Cluster(args.brokers, path=args.path, host=args.host, port=args.port,
                 config={"auto.create.topics.enable": True}) as cluster:
        print(f"serving a {args.brokers}-broker cluster to Kafka clients on "
              f"{cluster.bootstrap_servers} (Ctrl-C or SIGTERM stops)", file=out, flush=True)
        while not stop.wait(0.5):
            pass
        print("stopping: closing connections and flushing the logs", file=out, flush=True)
    return EXIT_OK


def cmd_serve(args, out=sys.stdout):
    import signal
    import threading
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set())
                for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        if args.brokers > 1:
            return _serve_cluster(args, stop, out)
        db = _open(args.path)
        try:
            server = db.serve(args.host, args.port)
            print(f"serving {os.path.abspath(args.path)} to Kafka clients on "
                  f"{server.bootstrap_servers} (Ctrl-C or SIGTERM stops)", file=out, flush=True)
            while not stop.wait(0.5):
                pass
            print("stopping: closing connections and flushing the logs", file=out, flush=True)
        finally:
            db.close()   # the server first, then every log flushed: nothing acknowledged lost
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return EXIT_OK


def cmd_compact(args, out=sys.stdout):
    if _missing(args.path, "compact"):
        return EXIT_USAGE
    db = _open(args.path)
    try:
        names = [args.topic] if args.topic is not None else db.topics(internal=True)
        described = [db.describe_topic(name) for name in names]
        total = sum(p.size_bytes for d in described for p in d.partitions
                    if "compact" in d.config["cleanup.policy"])
        # Each pass reads the dirty segments for its offset map, then copies every segment.
        bar = Progress("compact", 2 * total, enabled=not args.quiet)
        done = [0]

        def progress(nbytes):
            done[0] += nbytes
            bar.update(min(done[0], bar.total))
        results = db.compact(args.topic, progress=progress)
        bar.finish()
        status = EXIT_OK
        for result in results:
            stats, name = result.stats, f"{result.tp.topic}-{result.tp.partition}"
            if result.aborted is not None:
                print(f"{name}: not cleaned, {result.aborted}", file=out)
                status = EXIT_PROBLEMS   # asked to clean it, and did not: a script must know
                continue
            if stats is None:
                print(f"{name}: nothing to clean (next pass starts at offset "
                      f"{result.first_dirty})", file=out)
                continue
            print(f"{name}: kept {stats.records_kept:,} of "
                  f"{stats.records_read:,} records, {stats.bytes_read:,} -> "
                  f"{stats.bytes_written:,} bytes in {stats.elapsed_s:.2f} s", file=out)
        if not results:
            print("no compacted topic (cleanup.policy=compact) to clean", file=out)
    finally:
        db.close()
    return status


# --- topics ---------------------------------------------------------------------


def _open(path, readonly=False):
    """The database at --path; open() makes a new one and refuses what is not one."""
    import streamlog
    return streamlog.open(path, readonly=readonly)


def _parse_configs(pairs):
    config = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep:
            raise ValueError(f"--config takes key=value, got {pair!r}")
        config[key.strip()] = value.strip()
    return config


def cmd_topics(args, out=sys.stdout):
    readonly = args.action in ("list", "describe")
    # kafka-topics' checkInvalidArgs: an option another action takes is refused, not ignored.
    misplaced = [option for option, given in (("--partitions", args.partitions is not None),
                                              ("--config", bool(args.config)))
                 if given and args.action != "create"]
    if args.internal and args.action in ("create", "delete"):
        misplaced.append("--internal")
    if misplaced:
        print(f"streamlog topics {args.action}: {' and '.join(misplaced)} cannot be used with "
              f"{args.action}", file=sys.stderr)
        return EXIT_USAGE
    if args.action != "create" and _missing(args.path, "topics"):
        return EXIT_USAGE
    if args.action in ("create", "delete") and args.topic is None:
        print(f"streamlog topics {args.action}: name the topic", file=sys.stderr)
        return EXIT_USAGE
    # kafka-topics --list --topic: the names that match it (TopicFilter), nothing if none.
    listed = _topic_regex(args.topic or ".*", "topics list") if args.action == "list" else None
    with _open(args.path, readonly=readonly) as db:
        if args.action == "list":
            for name in db.topics(internal=args.internal):
                if listed.fullmatch(name):
                    print(name, file=out)
        elif args.action == "create":
            d = db.create_topic(args.topic, 1 if args.partitions is None else args.partitions,
                                _parse_configs(args.config))
            print(f"created topic {d.name} with {len(d.partitions)} partition(s)", file=out)
        elif args.action == "delete":
            db.delete_topic(args.topic)
            print(f"deleted topic {args.topic}", file=out)
        elif args.action == "describe":
            for name in ([args.topic] if args.topic else db.topics(internal=args.internal)):
                _print_description(db.describe_topic(name), out)
    return EXIT_OK


def _print_description(d, out):
    configs = " ".join(f"{k}={v}" for k, v in sorted(d.overrides.items())) or "(defaults)"
    print(f"Topic: {d.name}\tTopicId: {d.topic_id}\tPartitionCount: {len(d.partitions)}\t"
          f"Configs: {configs}", file=out)
    for p in d.partitions:
        print(f"\tPartition: {p.partition}\tLogStartOffset: {p.log_start_offset}\t"
              f"HighWatermark: {p.high_watermark}\tLastStableOffset: {p.last_stable_offset}\t"
              f"Segments: {p.segments}\tSize: {p.size_bytes}" +
              ("" if p.first_dirty_offset is None else
               f"\tFirstDirtyOffset: {p.first_dirty_offset}\tDirtyRatio: {p.dirty_ratio:.2f}"),
              file=out)


# --- produce --------------------------------------------------------------------


def _json_field(data):
    """Bytes as consume --format json prints them: the text when they are UTF-8, else
    {"base64": "..."}; _json_bytes reads both back to the same bytes."""
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}


def _json_headers(headers):
    """A record's headers as consume --format json prints them: an object, or, when a name
    repeats (Kafka allows it), a list of [name, value] pairs in their order, which an object
    would lose."""
    names = [name for name, _ in headers]
    if len(set(names)) == len(names):
        return {name: _json_field(value) for name, value in headers}
    return [[name, _json_field(value)] for name, value in headers]


def _json_bytes(value, what):
    """The bytes of a key, value or header value of produce --format json: a string's UTF-8,
    the bytes of {"base64": "..."} (the form _json_field gives bytes that are not UTF-8, so
    that consume's output produces the same records), any other JSON as its compact text."""
    if value is None:
        return None
    try:
        if isinstance(value, str):
            return value.encode("utf-8")
        if isinstance(value, dict) and list(value) == ["base64"] and \
                isinstance(value["base64"], str):
            return base64.b64decode(value["base64"], validate=True)
    except ValueError as exc:   # a lone surrogate (\ud800); base64's binascii.Error
        raise ValueError(f"{what}: {exc}") from None
    return json.dumps(value, separators=(",", ":")).encode("utf-8")


def cmd_produce(args, out=sys.stdout, stdin=None):
    stdin = stdin or sys.stdin.buffer
    if _missing(args.path, "produce"):   # a new database has no topic to produce to
        return EXIT_USAGE
    with _open(args.path) as db:
        db.describe_topic(args.topic)  # a missing topic fails before any input is read
        producer = db.producer(acks=args.acks, linger_ms=args.linger_ms,
                               compression_type=args.compression)
        bar = Progress("produce", 0, unit="records", enabled=not args.quiet and sys.stderr.isatty())
        sent = [0]
        try:
            _produce_lines(args, producer, stdin, bar, sent)
        except (ValueError, TypeError) as exc:
            producer.flush()  # what came before the bad line is written, and said so
            bar.finish()
            raise ValueError(f"{exc}; the {sent[0]} record(s) before it were produced to "
                             f"{args.topic}") from None
        producer.flush()
        bar.finish()
    print(f"produced {sent[0]} record(s) to {args.topic}", file=sys.stderr)
    return EXIT_OK


def _produce_lines(args, producer, stdin, bar, sent):
    """Send one record per input line, counting them in sent[0]; a bad line raises
    ValueError (or the producer's TypeError) naming its number."""
    separator = args.key_separator.encode() if args.key_separator else None
    for n, raw in enumerate(stdin, 1):
        line = raw.rstrip(b"\r\n")
        if not line and args.format == "text" and not args.keep_empty:
            continue
        key = headers = None
        partition = args.partition
        timestamp = None
        if args.format == "json":
            try:
                doc = json.loads(line)
            except ValueError as exc:
                raise ValueError(f"line {n} is not JSON: {exc}") from None
            if not isinstance(doc, dict) or "value" not in doc:
                raise ValueError(f'line {n}: expected an object with "value" (and optional '
                                 '"key", "headers", "partition", "timestamp")')
            given = doc.get("headers") or {}
            if isinstance(given, dict):
                given = list(given.items())
            elif not (isinstance(given, list) and all(
                    isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str)
                    for pair in given)):  # the forms consume --format json prints
                raise ValueError(f'line {n}: "headers" must be an object {{"name": value}} '
                                 f'or a list of ["name", value] pairs, not {given!r}')
            try:
                value = _json_bytes(doc["value"], "value")
                key = _json_bytes(doc.get("key"), "key")
                headers = [(k, _json_bytes(v, f"header {k!r}")) for k, v in given]
            except ValueError as exc:
                raise ValueError(f"line {n}: {exc}") from None
            partition = doc.get("partition", partition)
            timestamp = doc.get("timestamp")
        elif separator is not None:
            if separator not in line:
                raise ValueError(f"line {n} has no key separator {args.key_separator!r}")
            key, value = line.split(separator, 1)
        else:
            value = line
        try:
            producer.send(args.topic, value=value, key=key, partition=partition,
                          timestamp_ms=timestamp, headers=headers)
        except (TypeError, ValueError, StreamlogError) as exc:
            raise ValueError(f"line {n}: {exc}") from None
        sent[0] += 1
        if sent[0] % 10000 == 0:
            bar.update(sent[0])


# --- consume --------------------------------------------------------------------


def _parse_time(text, option):
    """Milliseconds since the epoch from an integer or an ISO-8601 time (UTC if naive)."""
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{option} takes milliseconds since the epoch or an ISO-8601 time "
                         f"(2026-11-27T10:00:00, UTC unless it names a zone), got {text!r}") \
            from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return int(moment.timestamp() * 1000)


def _text(data):
    # A null key or value (a tombstone) prints as "null", kafka-console-consumer's default
    # null.literal (DefaultMessageFormatter), not as the empty line of an empty value.
    return "null" if data is None else data.decode("utf-8", errors="backslashreplace")


def _format_record(record, fmt, print_key, separator):
    if fmt == "json":
        return json.dumps({"topic": record.topic, "partition": record.partition,
                           "offset": record.offset, "timestamp": record.timestamp,
                           "key": _json_field(record.key), "value": _json_field(record.value),
                           "headers": _json_headers(record.headers)})
    value = _text(record.value)
    if print_key:
        return f"{_text(record.key)}{separator}{value}"
    return value


def cmd_consume(args, out=sys.stdout):
    import streamlog
    if _missing(args.path, "consume"):
        return EXIT_USAGE
    if args.group is not None and (args.partition is not None or args.offset is not None or
                                   args.from_timestamp is not None):
        print("streamlog consume: --group reads where the group's committed offsets say (or "
              "--from-beginning for a new group); it takes no --partition, --offset or "
              "--from-timestamp", file=sys.stderr)
        return EXIT_USAGE
    if args.offset is not None and args.partition is None and args.group is None:
        # kafka-console-consumer: "The partition is required when offset is specified."
        print("streamlog consume: --offset needs --partition (an offset is one partition's)",
              file=sys.stderr)
        return EXIT_USAGE
    if args.max_messages == -1:
        args.max_messages = None   # kafka-console-consumer's -1: no limit (its default)
    elif args.max_messages is not None and args.max_messages < 0:
        print(f"streamlog consume: --max-messages takes a count >= 0, or -1 for no limit; "
              f"got {args.max_messages}", file=sys.stderr)
        return EXIT_USAGE
    # A group commits what it read (to __consumer_offsets): that needs the writer's lock.
    with _open(args.path, readonly=args.group is None) as db:
        info = db.describe_topic(args.topic)
        parts = [args.partition] if args.partition is not None else \
            [p.partition for p in info.partitions]
        tps = [streamlog.TopicPartition(args.topic, p) for p in parts]
        consumer = db.consumer(auto_offset_reset="earliest" if args.from_beginning else "latest",
                               group_id=args.group, enable_auto_commit=False)
        if args.group is not None:
            consumer.subscribe([args.topic])  # as kafka-console-consumer --group
        else:
            consumer.assign(tps)
            _seek_start(consumer, tps, args)
        shown, interrupted = _print_records(consumer, args, out)
        consumer.close()
    print(f"consumed {shown} record(s)", file=sys.stderr)
    return EXIT_INTERRUPTED if interrupted else EXIT_OK


def _seek_start(consumer, tps, args):
    if args.offset == "earliest":
        consumer.seek_to_beginning(tps)
    elif args.offset == "latest":
        consumer.seek_to_end(tps)
    elif args.offset is not None:
        for tp in tps:
            consumer.seek(tp, args.offset)
    elif args.from_timestamp is not None:
        moment = _parse_time(args.from_timestamp, "--from-timestamp")
        found = consumer.offsets_for_times({tp: moment for tp in tps})
        for tp in tps:
            if found[tp] is None:
                consumer.seek_to_end([tp])
            else:
                consumer.seek(tp, found[tp].offset)
    elif args.from_beginning:
        consumer.seek_to_beginning()


def _print_records(consumer, args, out):
    """Print records until --max-messages, --timeout-ms of quiet or Ctrl-C; with --group,
    commit what was printed: each assigned partition's position, as kafka-console-consumer
    does, but never past a record fetched and left unprinted by --max-messages or Ctrl-C.
    Returns how many records were printed, and whether Ctrl-C ended it."""
    import streamlog
    shown = 0
    cut = {}  # tp -> the first offset fetched but not printed
    printed = {}  # tp -> the offset after the last record printed: what Ctrl-C commits
    interrupted = False
    bar = Progress("consume", 0, unit="records", enabled=not args.quiet and sys.stderr.isatty())
    # kafka-console-consumer: a negative --timeout-ms is no timeout (ConsoleConsumerOptions).
    timeout = None if args.timeout_ms < 0 else args.timeout_ms / 1000
    try:
        while args.max_messages is None or shown < args.max_messages:
            records = consumer.poll(timeout=timeout)
            if not records:
                break
            if args.max_messages is not None and len(records) > args.max_messages - shown:
                for r in records[args.max_messages - shown:]:
                    cut.setdefault(streamlog.TopicPartition(r.topic, r.partition), r.offset)
                records = records[:args.max_messages - shown]
            for record in records:
                print(_format_record(record, args.format, args.print_key, args.key_separator),
                      file=out)
                printed[streamlog.TopicPartition(record.topic, record.partition)] = \
                    record.offset + 1
                shown += 1
            # Each poll's records reach a pipe now, not when the buffer fills or the command
            # ends: `consume ... | grep` follows a topic as kafka-console-consumer's does.
            # Counted before: a Ctrl-C once they are out says how many it printed.
            out.flush()
            bar.update(shown)
    except KeyboardInterrupt:
        # kafka-console-consumer's shutdown hook wakes the consumer up and closes it, which
        # commits what was consumed (ConsoleConsumer.addShutdownHook): Ctrl-C ends the
        # command, not the group's progress. The partitions' positions may be past records
        # fetched and not printed, so only what was printed is committed.
        interrupted = True
    bar.finish()
    if args.group is not None:
        consumer.commit(offsets=printed if interrupted else
                        {tp: cut.get(tp, consumer.position(tp)) for tp in consumer.assignment()})
    return shown, interrupted


# --- groups ----------------------------------------------------------------------


def _parse_topic_partitions(db, specs):
    """["t", "t:0,2"] -> [TopicPartition]: every partition of t, or the ones listed."""
    import streamlog
    out = []
    for spec in specs:
        topic, sep, parts = spec.partition(":")
        if sep:   # every comma-separated item a number, as Kafka's parseTopicsWithPartitions
            try:
                numbers = [int(p) for p in parts.split(",")]
            except ValueError:
                raise ValueError(f"--topic takes TOPIC or TOPIC:P1,P2, got {spec!r}") from None
        else:
            numbers = [p.partition for p in db.describe_topic(topic).partitions]
        out.extend(streamlog.TopicPartition(topic, p) for p in numbers)
    return out


# --- get-offsets, delete-records: kafka-get-offsets and kafka-delete-records ---------

# kafka-get-offsets' --topic-partitions item (GetOffsetShell.TOPIC_PARTITION_PATTERN): an
# optional topic regex, then optionally ':' and a partition, a range LOW-HIGH (HIGH
# excluded), LOW- or -HIGH.
_PARTITION_RULE = re.compile(r"([^:,]*)(?::(?:([0-9]*)|(?:([0-9]*)-([0-9]*))))?")
_TIME_NAMES = {"-1": "latest", "-2": "earliest", "-3": "max-timestamp",
               # Without tiered storage a partition's local log start is its log start.
               "-4": "earliest", "earliest-local": "earliest"}


def _offset_spec(text):
    """--time: Database.list_offsets()'s spec, from kafka-get-offsets' names and numbers, or
    a time (ms, or ISO-8601)."""
    if text in ("latest-tiered", "-5"):
        raise ValueError("--time latest-tiered asks for the last offset in tiered storage, "
                         "which a streamlog database does not have")
    spec = _TIME_NAMES.get(text, text)
    if spec in ("earliest", "latest", "max-timestamp"):
        return spec
    try:
        moment = _parse_time(text, "--time")
    except ValueError:
        moment = -1
    if moment < 0:
        raise ValueError(f"--time takes -1 or latest, -2 or earliest, -3 or max-timestamp, "
                         f"-4 or earliest-local, or a time (ms, or ISO-8601), got {text!r}")
    return moment


def _topic_regex(text, option):
    """A topic filter as Kafka's tools read it (TopicFilter): trimmed, ',' meaning '|',
    spaces and enclosing quotes dropped, matched against whole names."""
    regex = text.strip().replace(",", "|").replace(" ", "").strip("\"'")
    try:
        return re.compile(regex)
    except re.error as exc:
        raise ValueError(f"{option}: {regex!r} is no valid regular expression ({exc})") from None


def _partition_rules(args):
    """[(topic regex, partition test)] from --topic-partitions, or from --topic and
    --partitions; a partition is chosen when one rule takes it."""
    if args.topic_partitions is None:
        numbers = set()
        for item in (args.partitions or "").split(",") if args.partitions else ():
            try:
                numbers.add(int(item))
            except ValueError:
                raise ValueError(f"--partitions takes a comma-separated list of partition "
                                 f"numbers, got {args.partitions!r}") from None
        return [(_topic_regex(args.topic or ".*", "--topic"),
                 lambda p: not numbers or p in numbers)]
    rules = []
    for item in args.topic_partitions.split(","):
        match = _PARTITION_RULE.fullmatch(item)
        if match is None:
            raise ValueError(f"--topic-partitions: {item!r} is not TOPIC, TOPIC:P, "
                             f"TOPIC:LOW-HIGH, TOPIC:LOW- or TOPIC:-HIGH")
        topic, one, low, high = (group or None for group in match.groups())
        if one is not None:
            def test(p, one=int(one)):
                return p == one
        else:
            def test(p, low=int(low or 0), high=int(high or 2**31 - 1)):
                return low <= p < high
        rules.append((_topic_regex(topic or ".*", "--topic-partitions"), test))
    return rules


def cmd_get_offsets(args, out=sys.stdout):
    if _missing(args.path, "get-offsets"):
        return EXIT_USAGE
    if args.topic_partitions is not None and (args.topic is not None or
                                              args.partitions is not None):
        print("streamlog get-offsets: --topic-partitions cannot be used with --topic or "
              "--partitions", file=sys.stderr)
        return EXIT_USAGE
    spec = _offset_spec(args.time)
    rules = _partition_rules(args)
    import streamlog
    with _open(args.path, readonly=True) as db:
        partitions = []
        for name in db.topics(internal=not args.exclude_internal_topics):
            chosen = [test for regex, test in rules if regex.fullmatch(name)]
            if chosen:
                partitions.extend(streamlog.TopicPartition(name, p.partition)
                                  for p in db.describe_topic(name).partitions
                                  if any(test(p.partition) for test in chosen))
        if not partitions:
            print("streamlog get-offsets: no topic partition matches the filters given",
                  file=sys.stderr)
            return EXIT_PROBLEMS
        found = db.list_offsets({tp: spec for tp in partitions})
    # GetOffsetShell's order (the partitions' "topic-partition" names) and its omission of a
    # partition without an offset for the time.
    for tp in sorted(found, key=lambda tp: f"{tp.topic}-{tp.partition}"):
        if found[tp] is not None:
            print(f"{tp.topic}:{tp.partition}:{found[tp].offset}", file=out)
    return EXIT_OK


def _offsets_to_delete(path):
    """{TopicPartition: offset} of kafka-delete-records' --offset-json-file:
    {"partitions": [{"topic": "t", "partition": 0, "offset": 10}, ...], "version": 1}."""
    import streamlog
    try:
        with open(path, encoding="utf-8") as f:
            document = json.load(f)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}") from None
    except OSError as exc:   # unreadable input
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
    if not isinstance(document, dict):
        raise ValueError(f"{path} holds no JSON object")
    version = document.get("version", 1)
    if version != 1 or isinstance(version, bool):
        raise ValueError(f"{path}: version {version!r} is not supported (1 is)")
    if not isinstance(document.get("partitions"), list):
        raise ValueError(f"{path} has no \"partitions\" list")
    offsets, twice = {}, []
    for entry in document["partitions"]:
        if not (isinstance(entry, dict) and isinstance(entry.get("topic"), str) and
                all(isinstance(entry.get(k), int) and not isinstance(entry.get(k), bool)
                    for k in ("partition", "offset"))):
            raise ValueError(f"{path}: each partition is {{\"topic\": name, \"partition\": "
                             f"number, \"offset\": number}}, not {json.dumps(entry)}")
        tp = streamlog.TopicPartition(entry["topic"], entry["partition"])
        if tp in offsets:
            twice.append(f"{tp.topic}-{tp.partition}")
        offsets[tp] = entry["offset"]
    if twice:
        raise ValueError(f"{path} names partitions more than once: {', '.join(twice)}")
    return offsets


def cmd_delete_records(args, out=sys.stdout):
    if _missing(args.path, "delete-records"):
        return EXIT_USAGE
    offsets = _offsets_to_delete(args.offset_json_file)
    failed = 0
    with _open(args.path) as db:
        print("Executing records delete operation", file=out)
        results = []
        # One partition at a time, as Kafka's DeleteRecords answers each partition alone:
        # one refused does not hold back the others.
        for tp, offset in offsets.items():
            try:
                results.append((tp, f"low_watermark: {db.delete_records({tp: offset})[tp]}"))
            except StreamlogError as exc:
                failed += 1
                results.append((tp, f"error: {_cli_message(exc, args)}"))
        print("Records delete operation completed:", file=out)
        for tp, result in results:
            print(f"partition: {tp.topic}-{tp.partition}\t{result}", file=out)
    return EXIT_PROBLEMS if failed else EXIT_OK


def _print_group(d, out):
    print(f"Group: {d.group_id}\tState: {d.state}\tAssignor: {d.assignor or '-'}\t"
          f"Generation: {d.generation}\tMembers: {len(d.members)}\tTotalLag: {d.total_lag}",
          file=out)
    clients = {m.member_id: m for m in d.members}
    print("TOPIC\tPARTITION\tCURRENT-OFFSET\tLOG-END-OFFSET\tLAG\tCONSUMER-ID\tCLIENT-ID",
          file=out)

    def show(value):
        return "-" if value is None else str(value)
    for tp, p in d.partitions.items():
        member = clients.get(p.member_id)
        print(f"{tp.topic}\t{tp.partition}\t{show(p.committed)}\t{show(p.log_end_offset)}\t"
              f"{show(p.lag)}\t{show(p.member_id)}\t{member.client_id if member else '-'}",
              file=out)
    for m in d.members:
        if not m.assignment:
            print(f"-\t-\t-\t-\t-\t{m.member_id}\t{m.client_id}", file=out)


def cmd_groups(args, out=sys.stdout):
    readonly = args.action in ("list", "describe")
    if _missing(args.path, "groups"):
        return EXIT_USAGE
    if args.action != "list" and not args.group:
        print(f"streamlog groups {args.action}: name the group", file=sys.stderr)
        return EXIT_USAGE
    with _open(args.path, readonly=readonly) as db:
        if args.action == "list":
            for g in db.list_groups():
                print(f"{g.group_id}\t{g.state}\t{g.protocol_type or '-'}", file=out)
        elif args.action == "describe":
            _print_group(db.describe_group(args.group), out)
        elif args.action == "delete":
            db.delete_group(args.group)
            print(f"deleted group {args.group}", file=out)
        else:
            strategies = {"earliest": args.to_earliest, "latest": args.to_latest,
                          "offset": args.to_offset, "datetime": args.to_datetime,
                          "shift": args.shift_by}
            chosen = [(k, v) for k, v in strategies.items() if v not in (None, False)]
            if len(chosen) != 1:
                print("streamlog groups reset-offsets: give exactly one of --to-earliest, "
                      "--to-latest, --to-offset, --to-datetime, --shift-by", file=sys.stderr)
                return EXIT_USAGE
            strategy, value = chosen[0]
            value = _parse_time(value, "--to-datetime") if strategy == "datetime" else value
            if args.all_topics:
                partitions = sorted(db.describe_group(args.group).partitions)
            elif args.topic:
                partitions = _parse_topic_partitions(db, args.topic)
            else:
                print("streamlog groups reset-offsets: give --topic TOPIC[:P,...] (repeatable) "
                      "or --all-topics", file=sys.stderr)
                return EXIT_USAGE
            plan = db.reset_group_offsets(args.group, partitions, strategy,
                                          None if value is True else value,
                                          dry_run=not args.execute)
            print("TOPIC\tPARTITION\tNEW-OFFSET", file=out)
            for tp, offset in sorted(plan.items()):
                print(f"{tp.topic}\t{tp.partition}\t{offset}", file=out)
            if args.execute:
                print(f"reset {len(plan)} offset(s) of group {args.group}", file=out)
            else:
                print("(dry run: add --execute to apply)", file=out)
    return EXIT_OK


def build_parser():
    parser = argparse.ArgumentParser(
        prog="streamlog", description="Embedded Kafka-model log: topics, produce, consume, "
                                      "inspect and verify data directories.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    path_help = "the database directory"
    p = sub.add_parser("topics", help="list, create, delete or describe topics")
    p.add_argument("action", choices=["list", "create", "delete", "describe"])
    p.add_argument("topic", nargs="?", help="the topic (create, delete; describe: all if "
                   "absent; list: a regular expression the names listed match)")
    p.add_argument("--path", required=True, help=path_help)
    p.add_argument("--partitions", type=int, help="partition count for create (default 1)")
    p.add_argument("--config", action="append", metavar="KEY=VALUE",
                   help="topic config for create, e.g. retention.ms=86400000 (repeatable)")
    p.add_argument("--internal", action="store_true",
                   help="list and describe internal topics too")
    p.set_defaults(func=cmd_topics)

    p = sub.add_parser("produce", help="send lines (or JSON objects) from stdin to a topic",
                       description="One record per stdin line. text: the line is the value "
                                   "(or key SEP value with --key-separator). json: each line is "
                                   '{"value": ..., "key": ..., "headers": {...} or '
                                   '[["name", value], ...], "partition": n, "timestamp": ms}, '
                                   "as consume --format json prints it: a string is its UTF-8 "
                                   "bytes, "
                                   '{"base64": "..."} the bytes it encodes, other JSON its '
                                   "text.")
    p.add_argument("topic")
    p.add_argument("--path", required=True, help=path_help)
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.add_argument("--key-separator", help="split each text line into key and value")
    p.add_argument("--partition", type=int, help="send everything to this partition")
    p.add_argument("--acks", default="1", choices=["0", "1", "all"])
    p.add_argument("--linger-ms", type=int, default=5)
    p.add_argument("--compression", default="none", choices=list(compression.IDS),
                   help="the codec of the batches written (default none)")
    p.add_argument("--keep-empty", action="store_true", help="send empty lines as empty values")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.set_defaults(func=cmd_produce)

    p = sub.add_parser("consume", help="print records of a topic (opens the database read-only)")
    p.add_argument("topic")
    p.add_argument("--path", required=True, help=path_help)
    where = p.add_mutually_exclusive_group()
    where.add_argument("--from-beginning", action="store_true", help="start at the log start")
    where.add_argument("--offset", type=_start_offset,
                       help="start at this offset of --partition, or 'earliest' / 'latest'")
    where.add_argument("--from-timestamp", metavar="T",
                       help="start at the first record at or after T (ms, or ISO-8601)")
    p.add_argument("--partition", type=int, help="only this partition")
    p.add_argument("--max-messages", type=int,
                   help="stop after this many records (-1, the default: no limit)")
    p.add_argument("--timeout-ms", type=int, default=1000,
                   help="stop when no record arrives for this long (default 1000); -1: wait "
                        "for records until Ctrl-C, as kafka-console-consumer without it")
    p.add_argument("--format", choices=["text", "json"], default="text",
                   help='json: an object a line (topic, partition, offset, timestamp, key, '
                        'value, headers), bytes that are not UTF-8 as {"base64": "..."}, '
                        'headers as {"name": value} or, when a name repeats, as '
                        '[["name", value], ...]; produce --format json reads it back')
    p.add_argument("--print-key", action="store_true", help="text format: print key SEP value")
    p.add_argument("--key-separator", default="\t", help="separator for --print-key (tab)")
    p.add_argument("--group", metavar="GROUP",
                   help="read as a member of GROUP from its committed offsets, and commit what "
                        "is printed (opens the database for writing)")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.set_defaults(func=cmd_consume)

    p = sub.add_parser("groups", help="list, describe, delete consumer groups or reset their "
                                      "offsets",
                       description="list and describe open the database read-only; delete and "
                                   "reset-offsets need it free (no writer running) and the group "
                                   "without active members. reset-offsets prints the plan and "
                                   "applies it only with --execute.")
    p.add_argument("action", choices=["list", "describe", "delete", "reset-offsets"])
    p.add_argument("group", nargs="?", help="the group (all actions but list)")
    p.add_argument("--path", required=True, help=path_help)
    p.add_argument("--topic", action="append", metavar="TOPIC[:P,...]",
                   help="reset-offsets: these partitions (all of the topic without :P; "
                        "repeatable)")
    p.add_argument("--all-topics", action="store_true",
                   help="reset-offsets: every partition the group has offsets for")
    p.add_argument("--to-earliest", action="store_true", help="reset to the log start")
    p.add_argument("--to-latest", action="store_true", help="reset to the log end")
    p.add_argument("--to-offset", type=int, metavar="N", help="reset to offset N (clamped)")
    p.add_argument("--to-datetime", metavar="T",
                   help="reset to the first record at or after T (ms, or ISO-8601)")
    p.add_argument("--shift-by", type=int, metavar="N",
                   help="move the committed offset by N (negative: back)")
    p.add_argument("--execute", action="store_true", help="apply the reset (default: dry run)")
    p.set_defaults(func=cmd_groups)

    p = sub.add_parser("get-offsets", help="print partitions' offsets for a time, like "
                                            "kafka-get-offsets (opens the database read-only)",
                       description="Print TOPIC:PARTITION:OFFSET for each partition chosen "
                                   "(every one, internal topics too, by default), as "
                                   "kafka-get-offsets does; a partition with no record at or "
                                   "after --time is left out.")
    p.add_argument("--path", required=True, help=path_help)
    p.add_argument("--topic", help="a regular expression the topics' whole names match "
                                   "(default: every topic)")
    p.add_argument("--partitions", metavar="P,...", help="only these partitions")
    p.add_argument("--topic-partitions", metavar="PATTERNS",
                   help="comma-separated TOPIC-REGEX[:P | :LOW-HIGH | :LOW- | :-HIGH] items "
                        "(HIGH excluded), instead of --topic and --partitions")
    p.add_argument("--time", default="latest",
                   help="-1 or latest (the default: the high watermark), -2 or earliest, -3 "
                        "or max-timestamp, -4 or earliest-local, or a time (ms, or "
                        "ISO-8601): the first record at or after it")
    p.add_argument("--exclude-internal-topics", action="store_true",
                   help="leave out the internal topics")
    p.set_defaults(func=cmd_get_offsets)

    p = sub.add_parser("delete-records", help="delete the records below an offset, like "
                                              "kafka-delete-records",
                       description="Make each partition's records below an offset unreadable "
                                   "(the new log start); -1 means the high watermark. The "
                                   "segments below go at the next retention pass. Needs the "
                                   "writer's lock. Exit 1 when any partition was refused "
                                   "(each says why; the others are still deleted).")
    p.add_argument("--path", required=True, help=path_help)
    p.add_argument("--offset-json-file", required=True, metavar="FILE",
                   help='{"partitions": [{"topic": "t", "partition": 0, "offset": 10}], '
                        '"version": 1}')
    p.set_defaults(func=cmd_delete_records)

    p = sub.add_parser("dump", help="print the batches (and records) of segment files",
                       description="Print .log/.index/.timeindex files, like kafka-dump-log; "
                                   "with --verify, check a whole directory instead. With "
                                   "--path DIR, FILEs are relative to DIR "
                                   "(e.g. events-0/00000000000000000000.log), and "
                                   "--verify checks DIR.")
    p.add_argument("files", nargs="*", metavar="FILE",
                   help="segment files, or one directory with --verify")
    p.add_argument("--path", help="the database directory (FILEs are relative to it)")
    p.add_argument("--print-records", "--print-data-log", action="store_true",
                   help="also print every record of each batch")
    p.add_argument("--max-value-bytes", type=_at_least(0), default=60,
                   help="how much of each key and value to show (default 60)")
    p.add_argument("--verify", action="store_true",
                   help="check CRCs, offsets and indexes of the directory given")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_dump)

    p = sub.add_parser("verify", help="check CRCs, offsets and indexes of a whole directory",
                       description="Read every segment read-only and report corrupt batches, "
                                   "offset disorder and index entries that disagree with the log. "
                                   "Safe while a writer is running.")
    p.add_argument("directory", nargs="?", metavar="DIR",
                   help="the database directory (or give it as --path DIR)")
    p.add_argument("--path", help=path_help)
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("serve", help="serve the database to Kafka clients (a Kafka listener)",
                       description="Listen for Kafka clients (confluent-kafka, kafka-python, "
                                   "aiokafka, ...) on HOST:PORT, in front of the database, "
                                   "until Ctrl-C or SIGTERM; then close every connection and "
                                   "flush. Port 0 picks a free port (printed). Needs the "
                                   "writer's lock. What is served: docs/SERVER.md.")
    p.add_argument("--path", required=True, help=path_help)
    p.add_argument("--host", default="127.0.0.1", help="the address to listen on (loopback)")
    p.add_argument("--port", type=_port, default=9092,
                   help="the port (default 9092; 0: any); with --brokers N, broker i listens "
                        "on PORT+i")
    p.add_argument("--brokers", type=_at_least(1), default=1,
                   help="run N replicated brokers in one process, PATH holding the cluster "
                        "(docs/CLUSTER.md); default 1: the database at PATH alone")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("compact", help="run a log cleaning pass now on compacted topics",
                       description="Compact TOPIC (cleanup.policy=compact or compact,delete), "
                                   "or every compacted log of the database, now: each "
                                   "partition's active segment is rolled and cleaned up to "
                                   "min.compaction.lag.ms and open transactions "
                                   "(docs/COMPACTION.md). Needs the writer's lock.")
    p.add_argument("topic", nargs="?", help="the topic (every compacted log if absent)")
    p.add_argument("--path", required=True, help=path_help)
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_compact)

    p = sub.add_parser("repair", help="rebuild the metadata log from the partition directories",
                       description="For a database whose metadata log is damaged or lost: "
                                   "bring back the topics whose partition directories are on "
                                   "disk (names and partition counts from the directories, ids "
                                   "and configs from their partition.metadata and topic.json). "
                                   "Deletes nothing: the old metadata log is renamed aside. "
                                   "Needs the writer's lock.")
    p.add_argument("directory", nargs="?", metavar="DIR",
                   help="the database directory (or give it as --path DIR)")
    p.add_argument("--path", help=path_help)
    p.add_argument("--dry-run", action="store_true", help="report what would be done; change "
                                                          "nothing")
    p.set_defaults(func=cmd_repair)
    return parser


_READ_ONLY_COMMANDS = ("consume (without --group), topics list|describe, groups list|describe, "
                       "get-offsets, verify, dump")


def _cli_message(exc, args):
    """The library's error, said in commands where its own message names Python calls."""
    path = getattr(args, "path", None) or getattr(args, "directory", None)
    if isinstance(exc, UnknownTopicOrPartitionError) and exc.topic is not None:
        return (f"topic {exc.topic!r} does not exist in {path}; create it with: streamlog "
                f"topics create {exc.topic} --path {path}")
    if isinstance(exc, DatabaseLockedError):
        who = f"process {exc.holder}" if exc.holder else "another process"
        return (f"{exc.path or path} is open for writing by {who}, and this command writes: "
                f"run it once that process has closed the database. These commands only read, "
                f"and work meanwhile: {_READ_ONLY_COMMANDS}")
    if isinstance(exc, ReadOnlyError):
        return f"{exc} (the read-only commands are: {_READ_ONLY_COMMANDS})"
    return str(exc)


def _port(text):
    """argparse type: a TCP port, 0..65535 (0: any free one)."""
    port = int(text)
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0..65535 (0: any free one), got {port}")
    return port


def _start_offset(text):
    """argparse type of consume --offset, as ConsoleConsumerOptions.parseOffset reads it:
    'earliest', 'latest', or an offset >= 0."""
    if text in ("earliest", "latest"):
        return text
    try:
        number = int(text)
    except ValueError:
        number = -1
    if number < 0:
        raise argparse.ArgumentTypeError(f"takes 'earliest', 'latest' or an offset >= 0, got "
                                         f"{text!r}")
    return number


def _at_least(minimum):
    """argparse type: an integer of at least minimum."""
    def parse(text):
        try:
            number = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
        if number < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {number}")
        return number
    return parse


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except StreamlogError as exc:
        print(f"streamlog {args.command}: {_cli_message(exc, args)}", file=sys.stderr)
        # --path naming something other than a database is bad usage, as a missing one is.
        return EXIT_USAGE if isinstance(exc, NotADatabaseError) else EXIT_PROBLEMS
    except BrokenPipeError:  # `streamlog consume ... | head`
        return EXIT_OK
    except OSError as exc:  # a path the command itself reads or writes
        print(f"streamlog {args.command}: {exc}", file=sys.stderr)
        return EXIT_PROBLEMS
    except ValueError as exc:
        print(f"streamlog {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
