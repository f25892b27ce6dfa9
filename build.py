"""kvbake's entry point: `python build.py [COMMAND]`; see `python build.py --help`."""

import sys

from kvbake.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
