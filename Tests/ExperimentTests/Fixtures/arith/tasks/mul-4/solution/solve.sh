#!/bin/bash
echo 27 > /app/answer.txt
