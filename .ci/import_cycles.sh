#!/usr/bin/env bash
# Lists pairs of source files of the library (src/, without main.rs, src/bin and the patched
# crates of src/patched) that import
# each other: file A refers to an item of file B (`use super::x`, `use crate::a::b::{..}`, or a
# path such as `super::x::f()` in the code) and B refers to one of A. The project's rule is
# that dependencies point one way; a pair is a cycle between two files.
#
#   .ci/import_cycles.sh            lists the pairs; exits 1 if there is any
#
# It also checks the layers of src/server/ (etcdserver, v3rpc, etcdhttp, embed, lowest first):
# a room imports only rooms below it, and nothing outside src/server/ imports it.
#
# A path is resolved to the file of the longest module prefix that is a file (`crate::wal::
# record::Record` is src/wal/record.rs, `super::Wal` from src/wal/snapshot.rs is
# src/wal/mod.rs); an item re-exported by a parent counts as the parent's. Names bound by a
# `use` of a module (`use crate::wal;` then `wal::segment::f`), and a module's children in its file, are followed. Comments are
# ignored; `mod x;` declarations are not imports. Written in Perl, which every Debian has.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
exec perl -x "$0" "$@"
exit 1

#!perl
use strict;
use warnings;


# Module path (crate::a::b) <-> file.
my (%file_of, %mod_of);
sub walk {
    my ($dir) = @_;
    opendir(my $d, $dir) or die "$dir: $!";
    for my $e (sort readdir $d) {
        next if $e =~ /^\./;
        my $p = "$dir/$e";
        if (-d $p) { walk($p) unless $p eq 'src/bin' || $p eq 'src/patched'; next }
        next unless $e =~ /\.rs$/;
        next if $p eq 'src/main.rs';
        my $m = $p;
        $m =~ s{^src/}{};
        $m =~ s{\.rs$}{};
        $m =~ s{/mod$}{};
        $m = $m eq 'lib' ? 'crate' : "crate::" . join('::', split m{/}, $m);
        $file_of{$m} = $p;
        $mod_of{$p} = $m;
    }
}
walk('src');

# The file holding module path `$m` (longest prefix that is a file).
sub file_for {
    my @p = split /::/, $_[0];
    while (@p) {
        my $m = join('::', @p);
        return $file_of{$m} if exists $file_of{$m};
        pop @p;
    }
    return undef;
}

# Expands a use tree (`a::{b, c::{d, self}}`) into paths.
sub expand {
    my ($t) = @_;
    $t =~ s/\s+//g;
    my $i = index($t, '{');
    return ($t) if $i < 0;
    my $head = substr($t, 0, $i);
    my $body = substr($t, $i + 1, length($t) - $i - 2);
    my (@parts, $depth, $cur);
    ($depth, $cur) = (0, '');
    for my $c (split //, $body) {
        if ($c eq ',' && $depth == 0) { push @parts, $cur; $cur = ''; next }
        $depth++ if $c eq '{';
        $depth-- if $c eq '}';
        $cur .= $c;
    }
    push @parts, $cur if $cur ne '';
    my @out;
    for my $p (@parts) {
        for my $x (expand($p)) {
            if ($x eq 'self') { (my $h = $head) =~ s/::$//; push @out, $h }
            else { push @out, "$head$x" }
        }
    }
    return @out;
}

# Resolves a path written in scope `$scope` (a module path) to an absolute module path, or
# undef for paths outside the crate (std, other crates).
sub absolute {
    my ($path, $scope, $alias) = @_;
    my @p = split /::/, $path;
    my @base;
    if ($p[0] eq 'crate') { @base = ('crate'); shift @p }
    elsif ($p[0] eq 'self') { @base = split /::/, $scope; shift @p }
    elsif ($p[0] eq 'super') {
        @base = split /::/, $scope;
        while (@p && $p[0] eq 'super') { pop @base; shift @p }
    }
    elsif (exists $alias->{$p[0]}) { @base = split /::/, $alias->{$p[0]}; shift @p }
    else { return undef }
    return join('::', @base, @p);
}

my %edges;    # "a b" => 1: file a refers to file b
for my $file (sort keys %mod_of) {
    my $m = $mod_of{$file};
    open(my $fh, '<', $file) or die "$file: $!";
    local $/;
    my $src = <$fh>;
    close $fh;
    # Comments and string literals out (doc links name paths without importing them).
    # One pass, so that whichever starts first wins (a quote in a comment, `//` in a string).
    $src =~ s{("(?:\\.|[^"\\])*")|//[^\n]*|/\*.*?\*/|'(?:\\.|[^'\\])'}{defined $1 ? '""' : ' '}gse;
    # Scopes: inline `mod x { ... }` blocks change what `self` and `super` mean.
    my @tokens = split /(\bmod\s+\w+\s*\{|[{}])/, $src;
    my @stack = ([$m, 0]);    # (scope, brace depth at which it closes)
    my $depth = 0;
    # A module's children (`mod x;`) are in scope in its file without a `use`.
    my %alias;
    for my $c (keys %file_of) {
        $alias{$1} = $c if $c =~ /^\Q$m\E::(\w+)$/;
    }
    my @chunks;               # (scope, text)
    for my $t (@tokens) {
        next if !defined $t || $t eq '';
        if ($t =~ /^mod\s+(\w+)\s*\{$/) {
            $depth++;
            push @stack, [$stack[-1][0] . "::$1", $depth];
        } elsif ($t eq '{') {
            $depth++;
            push @chunks, [$stack[-1][0], $t];
        } elsif ($t eq '}') {
            pop @stack if @stack > 1 && $stack[-1][1] == $depth;
            $depth--;
            push @chunks, [$stack[-1][0], $t];
        } else {
            push @chunks, [$stack[-1][0], $t];
        }
    }
    # Rejoin consecutive chunks of one scope, so a `use` with braces is whole again.
    my @scoped;
    for my $c (@chunks) {
        if (@scoped && $scoped[-1][0] eq $c->[0]) { $scoped[-1][1] .= $c->[1] }
        else { push @scoped, [@$c] }
    }
    my %targets;
    for my $s (@scoped) {
        my ($scope, $text) = @$s;
        while ($text =~ /\buse\s+([^;]+);/g) {
            (my $tree = $1) =~ s/\s+as\s+\w+//g;
            for my $p (expand($tree)) {
                my $abs = absolute($p, $scope, \%alias) // next;
                # A use of a module binds its name: later `name::x` paths go through it.
                if (exists $file_of{$abs}) { (my $n = $abs) =~ s/.*:://; $alias{$n} = $abs }
                $targets{file_for($abs) // ''} = 1;
            }
        }
        (my $code = $text) =~ s/\buse\s+[^;]+;//g;
        while ($code =~ /(?<![\w:])((?:\w+::)+\w+)/g) {
            my $abs = absolute($1, $scope, \%alias) // next;
            $targets{file_for($abs) // ''} = 1;
        }
    }
    for my $t (keys %targets) {
        $edges{"$file $t"} = 1 if $t ne '' && $t ne $file;
    }
}

my $bad = 0;
for my $e (sort keys %edges) {
    my ($a, $b) = split / /, $e;
    next unless $a lt $b && $edges{"$b $a"};
    print "import cycle: $a <-> $b\n";
    $bad++;
}
if ($bad) {
    print "$bad pair(s) of files import each other: move what both need into a module below both\n";
}

# Layers: the rooms of src/server/, lowest first, import only rooms below them, and nothing
# outside src/server/ imports it (the layers below never see the server).
my @rooms = qw(src/server/etcdserver src/server/v3rpc src/server/etcdhttp src/server/embed);
sub rank {
    my ($f) = @_;
    for my $i (0 .. $#rooms) { return $i if index($f, "$rooms[$i]/") == 0 }
    return index($f, 'src/server/') == 0 ? -2 : -1;    # -2: src/server/mod.rs; -1: below
}
my $up = 0;
for my $e (sort keys %edges) {
    my ($a, $b) = split / /, $e;
    my ($ra, $rb) = (rank($a), rank($b));
    next if $rb < 0 && !($ra == -1 && $rb == -2);
    next if $ra >= $rb && $ra != -1;
    print "upward import: $a uses $b\n";
    $up++;
}
print "$up upward import(s): move what the lower file needs below it\n" if $up;
exit 1 if $bad || $up;
print "no two files import each other; no import runs upward\n";
exit 0;
