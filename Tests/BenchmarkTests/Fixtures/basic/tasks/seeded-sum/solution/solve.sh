#!/bin/bash
awk '{ s += $1 } END { print s }' /app/data/numbers.txt > /app/sum.txt
