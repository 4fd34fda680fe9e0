"""Entry point of one slot: `python -m spark_apps.runtime.run --app NAME --slot blue|green`.

Runs under plain `python` (local mode) or spark-submit (a cluster master). Exit code 0 after a
requested stop, 1 when the query failed, 2 for bad arguments or a bad app definition, 3 for a
staged launch never promoted (spark_apps.runtime.coordination.hold), 4 when the checkpoint cannot resume
on its input (lost input data). The wrapper restarts a driver after 1 or a signal's death only
(baton.driver_wrapper).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path

from baton.apps import AppDefinitionError, load_app
from baton.driver_wrapper import HOLD_ARG, HOLD_TIMEOUT_ARG, SPARE_ARG
from baton.records import Slot
from baton.settings import Settings

LOG_FORMAT = "%(asctime)s %(levelname)s [%(slot)s] %(name)s: %(message)s"


class SlotIdentity(logging.Filter):
    """Stamps every record with the slot it comes from (app/slot, generation if not 0): a slot's log
    lines can be told apart once logs are gathered in one place."""

    def __init__(self, identity: str):
        super().__init__()
        self.identity = identity

    def filter(self, record: logging.LogRecord) -> bool:
        record.slot = self.identity
        return True


def configure_logging(identity: str = "-") -> None:
    """The slot's log (stderr): the runtime's own lines (spark_apps, baton) from INFO, other
    libraries' from WARNING, each with a time and the slot's identity."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    handler.addFilter(SlotIdentity(identity))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    for name in ("spark_apps", "baton"):
        logging.getLogger(name).setLevel(logging.INFO)


def main(argv: list[str] | None = None) -> int:
    settings = Settings.load()
    configure_logging()  # bad arguments are said with a time too; the identity once it is known
    ap = argparse.ArgumentParser(prog="spark_apps.runtime.run")
    ap.add_argument("--app", required=True, help="app name (include/apps/<name>.yaml) or a path to a definition")
    ap.add_argument("--slot", required=True, choices=[s.value for s in Slot])
    ap.add_argument("--generation", type=int, default=0)
    ap.add_argument("--bootstrap", default=settings.kafka_bootstrap)
    ap.add_argument("--state-dir", type=Path, default=settings.state_dir)
    ap.add_argument("--starting-offsets", default="earliest")
    ap.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark setting")
    ap.add_argument(
        HOLD_ARG,
        type=Path,
        default=None,
        metavar="DRIVER_JSON",
        help="a staged launch (baton.launcher.stage): start up, then hold until this record names it",
    )
    ap.add_argument(HOLD_TIMEOUT_ARG, type=float, default=600.0, help="a staged launch never promoted exits after this")
    ap.add_argument(
        SPARE_ARG,
        type=Path,
        default=None,
        metavar="RESTARTS_JSON",
        help="a spare driver (baton.driver_wrapper): start up, then hold until this file names it",
    )
    args = ap.parse_args(argv)
    log = logging.getLogger("spark_apps.runtime.run")
    try:
        app = load_app(args.app)
    except AppDefinitionError as exc:
        log.error("bad app definition: %s", exc)
        return 2
    configure_logging(f"{app.name}/{args.slot}" + (f"/gen-{args.generation}" if args.generation else ""))
    conf = {}
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep:
            log.error("--conf %r: expected KEY=VALUE", item)
            return 2
        conf[key] = value
    from spark_apps.runtime.coordination.hold import Hold, SpareHold
    from spark_apps.runtime.harness import Harness

    hold = Hold(args.hold_until_recorded, args.hold_timeout_s) if args.hold_until_recorded is not None else None
    spare = SpareHold(args.spare_of) if args.spare_of is not None else None
    code = Harness(
        app,
        Slot(args.slot),
        args.bootstrap,
        args.state_dir,
        args.generation,
        conf,
        args.starting_offsets,
        hold=hold,
        spare=spare,
    ).run()
    # The query has stopped and its last status is out: a late SIGTERM (a stop backing up the control
    # request) must not turn this clean exit into a signal death while the JVM shuts down.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return code


if __name__ == "__main__":
    sys.exit(main())
