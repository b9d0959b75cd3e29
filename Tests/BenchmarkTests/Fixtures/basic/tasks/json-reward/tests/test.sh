#!/bin/bash
# Partial credit through reward.json: 0.75 for the right greeting.
if [ "$(tr -d '[:space:]' < /app/greeting.txt 2>/dev/null)" = "hello" ]; then
    echo '{"reward": 0.75, "note": "greeting ok"}' > /logs/verifier/reward.json
else
    echo '{"reward": 0.0}' > /logs/verifier/reward.json
fi
