#!/bin/bash
# The seed must still be there, the Dockerfile must not have been copied, the sum must be 12.
if [ -f /app/data/numbers.txt ] && [ ! -e /app/Dockerfile ] \
   && [ "$(tr -d '[:space:]' < /app/sum.txt 2>/dev/null)" = "12" ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
