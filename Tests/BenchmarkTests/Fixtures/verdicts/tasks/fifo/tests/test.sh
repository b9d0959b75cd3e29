#!/bin/bash
mkfifo /logs/verifier/reward.txt
