#!/bin/bash
echo 0.25 > /logs/verifier/reward.txt; echo 1 > /logs/verifier/reward.json
