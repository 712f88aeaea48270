import sys

from job_runner.process import main

sys.exit(main())
