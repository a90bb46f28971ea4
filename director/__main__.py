import sys

from director.cli import main

sys.exit(main())
