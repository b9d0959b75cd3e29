#!/bin/bash
echo '{"reward": NaN}' > /logs/verifier/reward.json
