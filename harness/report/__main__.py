"""``python -m harness.report``: see :mod:`harness.report` (docs/report.md)."""

from harness.report import main

raise SystemExit(main())
