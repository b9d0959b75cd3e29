#!/bin/bash
echo 16 > /app/answer.txt
