#!/bin/sh
# A deterministic stand-in for a coding agent that fixes the planted bug of examples/repair/project in two
# iterations: the first change is wrong (the failure stays, repro says so in feedback.txt), the second reads that
# feedback and fixes the loop bound. It runs in repro's sandboxed copy of the project.
set -eu
echo "iteration $REPRO_REPAIR_ITERATION; failing: $REPRO_REPAIR_FAILING_TESTS"
case "$REPRO_REPAIR_ITERATION" in
1) sed -i 's/result = 0/result = 1/' src/calc.py ;;
*) grep -q "failure is not gone" "$REPRO_REPAIR_DIR/feedback.txt"
   sed -i -e 's/result = 1/result = 0/' -e 's/range(len(items) - 1)/range(len(items))/' src/calc.py ;;
esac
