import os
import sys

# optable.py and other shared test tables live beside this file (tests/ is not a package)
sys.path.insert(0, os.path.dirname(__file__))
