#!/bin/bash
echo 64 > /app/answer.txt
