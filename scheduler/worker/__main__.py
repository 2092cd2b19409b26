"""`python -m scheduler.worker -- CMD...`: run CMD as a Shoal worker (see launcher)."""

import sys

from scheduler.worker import launcher

sys.exit(launcher.main())
