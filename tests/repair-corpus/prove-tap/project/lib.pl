# total: the sum of its arguments (the planted bug drops the last one).
sub total {
    my $s = 0;
    $s += $_[$_] for 0 .. $#_ - 1;
    return $s;
}
1;
