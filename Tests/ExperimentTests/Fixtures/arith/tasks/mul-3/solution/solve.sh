#!/bin/bash
echo 390 > /app/answer.txt
