#!/bin/bash
echo -0.25 > /logs/verifier/reward.txt
