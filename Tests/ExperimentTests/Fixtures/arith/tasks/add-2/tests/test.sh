#!/bin/bash
# reward 1 when /app/answer.txt holds the expected number
got=$(tr -d " \n" < /app/answer.txt 2>/dev/null)
if [ "$got" = "15" ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
