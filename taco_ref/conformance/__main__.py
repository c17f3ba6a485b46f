"""`python -m taco_ref.conformance MODULE`: the conformance kit's command line."""
import sys

from taco_ref.conformance import main

sys.exit(main())
