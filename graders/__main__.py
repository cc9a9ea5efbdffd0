import sys

from graders.runner import main

sys.exit(main())
