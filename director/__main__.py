import sys

from director.cli.boot import main

sys.exit(main())
