"""Fractions of a GPU: the reservation pod that holds one GPU through the device plugin
(`reservationpod`; the process inside it, `reserve`), the shares placed on it
(`shares`), GPUs it holds until its pod is gone (`holds`), and a share charged in its
namespace (`fractioncharge`)."""
